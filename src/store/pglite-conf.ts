// Settings for the embedded PGlite: a small buffer pool (PGlite's 128 MB default is most of its idle
// memory; the OS page cache still holds the files) — measured in docs/benchmarks.md.
export const PGLITE_CONF = ['shared_buffers=16MB'];

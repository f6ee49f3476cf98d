// Settings for the embedded PGlite: a small buffer pool. PostgreSQL touches the whole pool at start, so it
// is resident from the first second (PGlite's 128 MB default was most of its idle memory; 16 MB cost 9 MB
// of idle RSS over 4 MB); the OS page cache still holds the files. WAL buffers stay at the 512 kB the 16 MB
// pool gave them (a thirty-second of the pool), so a group commit's WAL is written as before. Measured in
// docs/benchmarks.md.
export const PGLITE_CONF = ['shared_buffers=4MB', 'wal_buffers=512kB'];

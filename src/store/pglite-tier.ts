// The embedded PGlite is compiled by V8's baseline WebAssembly compiler (Liftoff) alone. By default V8
// recompiles hot functions with its optimising compiler (TurboFan), and for PostgreSQL's large functions that
// takes tens of MB of compiler memory a time, freed into malloc arenas that the process then keeps: idle RSS
// was 203–276 MB with tiering and 153–163 MB without it, for about 10% more CPU per request at the embedded
// default's max rate (docs/benchmarks.md, "PGlite compiled by Liftoff alone").
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';

/**
 * Whether Liftoff compiles every PGlite function on this machine. Under `--liftoff-only` a function Liftoff
 * cannot compile aborts the process rather than going to TurboFan, and on x64 Liftoff needs SSE4.1 for some
 * of what PGlite's code does (with SSE4.1 turned off, V8 aborted: "no SSE4.1"; with AVX, AVX2, SSE4.2,
 * POPCNT, LZCNT, BMI and FMA off it compiled): without it, or where the CPU's features cannot be read, PGlite
 * keeps V8's default tiering. arm64's Liftoff has no such gap; other architectures keep the default too.
 */
export function liftoffCompilesPglite(arch: string = process.arch, cpuinfo: () => string = readCpuinfo): boolean {
  if (arch === 'arm64') return true;
  if (arch !== 'x64') return false;
  const flags = /^flags\s*:(.*)$/m.exec(cpuinfo());
  return flags !== null && flags[1]!.split(/\s+/).includes('sse4_1');
}

function readCpuinfo(): string {
  try {
    return readFileSync('/proc/cpuinfo', 'latin1');
  } catch {
    return '';
  }
}

/**
 * Runs `start` (which compiles PGlite's module, on whichever thread) with V8's `--liftoff-only` on, and turns
 * it off again once `start` settles, so a WebAssembly module compiled later (argon2 for the console's
 * passwords, the Opus encoder) is tiered up as usual. V8 flags are process-wide; nothing else compiles
 * WebAssembly while the store opens, before the gateway serves. Node 24's V8 ignores this flag when it is set
 * at run time (measured: its modules are still tiered up), so there it changes nothing.
 */
export async function compilingPgliteWithLiftoff<T>(start: () => Promise<T>, applies: boolean = liftoffCompilesPglite()): Promise<T> {
  if (!applies) return start();
  setFlagsFromString('--liftoff-only');
  try {
    return await start();
  } finally {
    // --liftoff-only also turns V8's dynamic tiering off (a flag implication), and turning it off again
    // does not undo that: without the second flag every later module stayed on Liftoff for good.
    setFlagsFromString(process.execArgv.includes('--no-wasm-dynamic-tiering') ? '--no-liftoff-only' : '--no-liftoff-only --wasm-dynamic-tiering');
  }
}

// Heap growth with many requests open. After a major GC, V8 lets the old generation grow to several
// times its live size before the next one. With plain requests the live heap is small (15–20 MB) and
// that slack costs little; with thousands of open streams it is 60–150 MB live, and the slack alone
// was 150–300 MB of RSS at 9,900 streams. Past CAP_ABOVE live bytes, growth is capped at GROWTH_PERCENT; below
// UNCAP_BELOW the choice goes back to V8. Measured both ways in docs/benchmarks.md. And on every Node, each
// isolate keeps V8's memory reducer able to run once the process is quiet (keepMemoryReducerAwake).
import v8 from 'node:v8';
import vm from 'node:vm';
import { PerformanceObserver, constants } from 'node:perf_hooks';

const CAP_ABOVE = 40 * 2 ** 20;
const UNCAP_BELOW = 24 * 2 ** 20;
const GROWTH_PERCENT = 20;
/** Node options by which an operator sizes the heap themselves: then this stays out of the way. */
const OPERATOR_SIZED = /^--(heap[-_]growing[-_]percent|max[-_]old[-_]space[-_]size|max[-_]heap[-_]size)\b/;

export interface HeapPolicy { readonly capped: boolean; stop(): void }

/** Watches major GCs and caps or uncaps V8's heap growth by the live heap each leaves behind. */
export function boundHeapGrowth(): HeapPolicy | null {
  const given = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)];
  if (given.some((a) => OPERATOR_SIZED.test(a))) return null;
  let capped = false;
  const set = (percent: number) => {
    // V8 reads this flag each time it sets the next GC's limit; 0 restores its own heuristic.
    v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
  };
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if ((e as unknown as { detail?: { kind?: number } }).detail?.kind !== constants.NODE_PERFORMANCE_GC_MAJOR) continue;
      const live = v8.getHeapStatistics().used_heap_size;
      if (!capped && live > CAP_ABOVE) { set(GROWTH_PERCENT); capped = true; } else if (capped && live < UNCAP_BELOW) { set(0); capped = false; }
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  return {
    get capped() { return capped; },
    stop() { observer.disconnect(); if (capped) set(0); },
  };
}

/**
 * How often each isolate of the gateway compiles a one-character script (below). V8 samples allocation every 8 s
 * and its exponentially decayed rate underflows to exactly zero after about 100 s without any; at 30 s the rate
 * stays above zero yet far below the threshold on every sample but the one that follows a compile.
 */
const REDUCER_NUDGE_MS = 30_000;

/**
 * Keeps V8's memory reducer able to run on this thread's isolate, for the thread's life (the timer is unref'd).
 * When a process goes quiet, the reducer is what
 * runs the memory-reducing GC: it shrinks the young generation back and gives the pages V8 pools after a GC back
 * to the system. It starts one only when every allocation rate V8 tracks is low, and since V8 13 (Node 24) one of
 * them, the rate of allocations on the embedder's C++ heap (cppgc), reads as *high* when it is exactly zero. Node
 * allocates there only for `node:vm` scripts and contexts, so in a process that makes none the reducer never
 * starts on its own; only its watchdog does, 100 s after the last major GC, and every ordinary major GC restarts
 * that wait. The embedded default idled at 190–195 MB on Node 24 for this (docs/benchmarks.md, "The memory reducer
 * on Node 24"). A `vm.Script` allocates a small object there, which keeps that rate just above zero. The cause
 * and this stopgap are from nodejs/node issue 66564 (V8: crbug.com/570738027, since V8 change 5935313).
 */
export function keepMemoryReducerAwake(): void {
  const nudge = (): void => { new vm.Script('0'); };
  nudge();
  setInterval(nudge, REDUCER_NUDGE_MS).unref();
}

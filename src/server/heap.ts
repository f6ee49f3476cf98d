// Heap growth with many requests open. After a major GC, V8 lets the old generation grow to several
// times its live size before the next one. With plain requests the live heap is small (15–20 MB) and
// that slack costs little; with thousands of open streams it is 60–150 MB live, and the slack alone
// was 150–300 MB of RSS at 9,900 streams. Past CAP_ABOVE live bytes, growth is capped at GROWTH_PERCENT; below
// UNCAP_BELOW the choice goes back to V8. Measured both ways in docs/benchmarks.md.
import v8 from 'node:v8';
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

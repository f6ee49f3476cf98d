// The active health probe: a cheap GET (default /v1/models, unbilled, never a generation) to every upstream that shares a pool.
import type { ModelConfig } from '../config.js';
import type { Upstreams } from './upstream.js';

/**
 * Probes, every `health.probe_interval_ms`, each upstream that serves a model with another upstream
 * (a lone upstream is tried whatever its health, so probing it would only add traffic). An answer
 * below 500 readmits an ejected upstream at once; no answer, or a 5xx, counts as a failure toward
 * an ejection, as a failed request does. Returns what stops the probes.
 */
export function startProbes(ups: Upstreams, models: readonly ModelConfig[]): () => void {
  const pooled = new Set<string>();
  for (const m of models) if (m.pool.length > 1) for (const e of m.pool) pooled.add(e.name);
  const timers: NodeJS.Timeout[] = [];
  for (const name of pooled) {
    const h = ups.config(name).health;
    if (h.probeIntervalMs === 0) continue;
    let running = false;
    const timer = setInterval(() => {
      if (running) return;
      running = true;
      void ups.probe(name, h.probePath).then((ok) => {
        running = false;
        if (ok) ups.pools.probeOk(name); else ups.pools.failed(name);
      });
    }, h.probeIntervalMs);
    timer.unref();
    timers.push(timer);
  }
  return () => { for (const t of timers) clearInterval(t); };
}

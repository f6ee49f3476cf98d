// Availability from live traffic: per-minute success and server-failure counts for each status area, kept for a day.

/** The areas the status page reports traffic for (a request may count in more than one). */
export const AREAS = ['alpha', 'beta', 'authentication', 'ledger', 'payments'] as const;
export type Area = typeof AREAS[number];

const MINUTES = 1440;

/** One area's ring of minute slots: the minute each slot holds, its successes and its server-side failures. */
class Ring {
  readonly minute = new Float64Array(MINUTES);
  readonly ok = new Uint32Array(MINUTES);
  readonly failed = new Uint32Array(MINUTES);
  constructor() { this.minute.fill(-1); }

  add(now: number, failed: boolean): void {
    const m = Math.floor(now / 60_000);
    const i = m % MINUTES;
    if (this.minute[i] !== m) { this.minute[i] = m; this.ok[i] = 0; this.failed[i] = 0; }
    if (failed) this.failed[i]!++; else this.ok[i]!++;
  }

  /** Successes and failures over the last `minutes` minutes (the current one included). */
  sum(now: number, minutes: number): { ok: number; failed: number } {
    const m = Math.floor(now / 60_000);
    let ok = 0;
    let failed = 0;
    for (let k = 0; k < minutes; k++) {
      const i = (m - k) % MINUTES;
      if (this.minute[i] !== m - k) continue;
      ok += this.ok[i]!; failed += this.failed[i]!;
    }
    return { ok, failed };
  }
}

/** The windows availability is reported over, in minutes. */
export const WINDOWS = { '5m': 5, '30m': 30, '1d': MINUTES } as const;
export type WindowName = keyof typeof WINDOWS;

export interface WindowFigures { successes: number; server_failures: number; availability: number | null }

/**
 * Counts on the hot path cost an increment and a comparison: no allocation per request. Callers'
 * mistakes (4xx, 429) and requests the client abandoned are not counted at all: availability is
 * successes over successes plus server-side failures.
 */
export class Availability {
  private readonly rings = new Map<Area, Ring>(AREAS.map((a) => [a, new Ring()]));

  /** A request's outcome in `area`: `status` below 400 is a success, 500 and above a failure, anything else is not counted. */
  record(area: Area, status: number, now = Date.now()): void {
    if (status >= 400 && status < 500) return;
    this.rings.get(area)!.add(now, status >= 500);
  }

  figures(area: Area, now = Date.now()): Record<WindowName, WindowFigures> {
    const ring = this.rings.get(area)!;
    const out = {} as Record<WindowName, WindowFigures>;
    for (const [name, minutes] of Object.entries(WINDOWS) as [WindowName, number][]) {
      const { ok, failed } = ring.sum(now, minutes);
      out[name] = { successes: ok, server_failures: failed, availability: ok + failed === 0 ? null : ok / (ok + failed) };
    }
    return out;
  }
}

// Spare holds (issue 29): with Redis, a key's next request is admitted before it arrives, between two of
// its requests, so its own admission costs no round trip on its path.
//
// When a request of a key far from every limit ends (settled or released), one hold is placed for the
// key's next request on this instance, by the same admission script as any request: it takes the worst
// case of the request that ended from the balance and the ceiling, one of the key's concurrency slots and
// one token of its rpm, and every instance sees them used. The key's next request here whose worst case
// fits in it, under the same key limits, takes it at once: its admission is the spare's, already decided.
// A spare no request takes within SPARE_MS is dropped and its rpm token given back, so the key's bucket
// is as if it had never been placed. A spare is a hold like any other: a `kill -9` leaves it to a takeover,
// which drops it (there is nothing to bill), and a graceful close gives it back.
//
// A key may have a few spares here at once (its depth, `spareDepth`): a client with several requests in
// flight ends several in one turn, and each end places one, so as many requests that follow take one. The
// pool grows only by ends and shrinks by requests and by the 2 s expiry, so it follows what the key's
// traffic on this instance needs, up to the depth. A key whose spares are taken at least its depth times
// a second is topped up to its depth in one go once half are gone: several spares in one admission call
// (a turn's admissions of an account are one script call), and no call at most ends.
import type { KeyRecord } from '../store/keys.js';

/** A spare nobody took within this long is given back. */
export const SPARE_MS = 2_000;
/** A key allowed fewer requests in flight than this gets no spare: one slot held ahead would be too large a share of it. */
export const SPARE_MIN_CONCURRENCY = 8;
/** At most this many spares per key and instance. */
export const SPARE_MAX_DEPTH = 8;

/** How many spares a key may have here at once: one per SPARE_MIN_CONCURRENCY of its concurrency (an eighth of it), at most SPARE_MAX_DEPTH; 0 below. */
export function spareDepth(concurrency: number): number {
  return Math.min(SPARE_MAX_DEPTH, Math.floor(concurrency / SPARE_MIN_CONCURRENCY));
}

export interface Spare {
  readonly id: string;
  readonly accountId: string;
  readonly keyId: string;
  /** What it holds: the worst case of the request whose end placed it. */
  readonly amount: bigint;
  /** The key's limits it was admitted under (`limitsOf`): a key changed since takes none. */
  readonly limits: string;
  readonly rpm: number;
  /** Its admission's rate-limit headers, which the request taking it returns. */
  readonly rateHeaders: Record<string, string>;
  timer?: NodeJS.Timeout;
}

/** The key's limits as admission applies them: a spare is used only under the same. */
export function limitsOf(key: KeyRecord, rpm: number, concurrency: number): string {
  return `${rpm}|${concurrency}|${key.spendLimit ?? ''}|${key.spendLimitPeriod ?? ''}`;
}

/** Each key's spares on this instance, oldest first, and how many are being placed. */
export class Spares {
  private readonly byKey = new Map<string, Spare[]>();
  private readonly placing = new Map<string, number>();
  private readonly pending = new Set<Promise<void>>();
  private readonly returning = new Set<Promise<void>>();
  /** Per key, spares taken in the second that began `at`, and in the second before it. */
  private readonly pace = new Map<string, { at: number; n: number; last: number }>();
  private closed = false;
  readonly counts = { placed: 0, used: 0, returned: 0 };

  /** `giveBack` drops a spare's hold and returns its rpm token; `freed` is told its slot is free here. */
  constructor(private readonly giveBack: (s: Spare) => Promise<void>, private readonly freed: (keyId: string) => void, private readonly ttlMs = SPARE_MS,
    private readonly now: () => number = Date.now) {}

  /**
   * How many spares to place for the key now, below `depth` with those there and on their way, none when
   * closing. One per request that ended; but a key whose spares here are taken at least `depth` times a
   * second is topped up to its depth in one go once half are gone, so that one admission call (a turn's
   * admissions of an account go as one) places several and most ends place none.
   */
  wanted(keyId: string, depth: number): number {
    if (this.closed) return 0;
    const have = (this.byKey.get(keyId)?.length ?? 0) + (this.placing.get(keyId) ?? 0);
    if (have >= depth) return 0;
    if (depth >= 2 && this.perSecond(keyId) >= depth) return have * 2 <= depth ? depth - have : 0;
    return 1;
  }

  /** Spares of the key taken here in the last whole second, or in this one if more. */
  private perSecond(keyId: string): number {
    const p = this.pace.get(keyId);
    if (!p) return 0;
    const age = this.now() - p.at;
    return age >= 2_000 ? 0 : age >= 1_000 ? p.n : Math.max(p.n, p.last);
  }

  private took(keyId: string): void {
    const now = this.now();
    const p = this.pace.get(keyId);
    if (!p) {
      if (this.pace.size >= 50_000) this.pace.clear(); // bounded: a pace forgotten only places one at a time
      this.pace.set(keyId, { at: now, n: 1, last: 0 });
      return;
    }
    if (now - p.at >= 1_000) { p.last = now - p.at < 2_000 ? p.n : 0; p.n = 0; p.at = now; }
    p.n++;
  }

  /** Whether one of the key's spares would admit a request of `amount` under `limits` (a request that will take it does not start early). */
  fits(keyId: string, amount: bigint, limits: string): boolean {
    const pool = this.byKey.get(keyId);
    return pool !== undefined && pool.some((s) => s.amount >= amount && s.limits === limits);
  }

  /**
   * The key's oldest spare that covers `amount` under the key's limits as they are now, out of the pool
   * (so a key topped up several at a time uses each well within its 2 s). Those admitted under limits
   * since changed are given back (the change feed brought a new rpm, ceiling or concurrency: the next
   * admission goes to Redis under them).
   */
  take(keyId: string, amount: bigint, limits: string): Spare | null {
    const pool = this.byKey.get(keyId);
    if (!pool) return null;
    let found: Spare | null = null;
    let stale: Spare[] | null = null;
    for (const s of pool) {
      if (s.limits !== limits) (stale ??= []).push(s);
      else if (found === null && s.amount >= amount) found = s;
    }
    if (stale) for (const s of stale) this.giveUp(s);
    if (!found) return null;
    this.remove(found);
    clearTimeout(found.timer);
    this.counts.used++;
    this.took(keyId);
    return found;
  }

  /** Places a spare: `admit` resolves to it once admitted, or to null when refused (or failed). */
  place(keyId: string, admit: () => Promise<Spare | null>): void {
    this.placing.set(keyId, (this.placing.get(keyId) ?? 0) + 1);
    const done = (): void => {
      const n = (this.placing.get(keyId) ?? 1) - 1;
      if (n > 0) this.placing.set(keyId, n); else this.placing.delete(keyId);
    };
    const p: Promise<void> = admit().then((s) => {
      done();
      if (!s) return;
      this.counts.placed++;
      // Closing meanwhile: given back at once.
      if (this.closed) { this.giveUp(s, false); return; }
      const pool = this.byKey.get(keyId);
      if (pool) pool.push(s); else this.byKey.set(keyId, [s]);
      s.timer = setTimeout(() => this.giveUp(s), this.ttlMs);
      s.timer.unref();
    }, done).finally(() => { this.pending.delete(p); });
    this.pending.add(p);
  }

  /**
   * The limiter lost a connection or a call failed: no spare is taken until new ones are placed (each by
   * an admission that succeeded since), so requests meanwhile go to admission and fail closed (503) while
   * it is unreachable. Each is given back (retried as a release if that fails too).
   */
  dropAll(): void {
    for (const pool of [...this.byKey.values()]) for (const s of [...pool]) this.giveUp(s);
  }

  /** Gives back every spare, and any still being placed, before the limiter closes. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.pending);
    this.dropAll();
    await Promise.all(this.returning);
  }

  /** Out of its key's pool; false when it was no longer there. */
  private remove(s: Spare): boolean {
    const pool = this.byKey.get(s.keyId);
    const i = pool ? pool.indexOf(s) : -1;
    if (i < 0) return false;
    pool!.splice(i, 1);
    if (pool!.length === 0) this.byKey.delete(s.keyId);
    return true;
  }

  /** `pooled`: it was put in its key's pool (not one admitted while closing), and is given back only if still there. */
  private giveUp(s: Spare, pooled = true): void {
    if (pooled && !this.remove(s)) return;
    clearTimeout(s.timer);
    this.counts.returned++;
    this.freed(s.keyId);
    // A give-back that fails leaves the hold to its expiry (the owner's close, or a takeover): only a slot and an amount held longer.
    const p = this.giveBack(s).catch(() => undefined).finally(() => { this.returning.delete(p); });
    this.returning.add(p);
  }
}

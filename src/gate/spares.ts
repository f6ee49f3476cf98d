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
import type { KeyRecord } from '../store/keys.js';

/** A spare nobody took within this long is given back. */
export const SPARE_MS = 2_000;
/** A key allowed fewer requests in flight than this gets no spare: one slot held ahead would be too large a share of it. */
export const SPARE_MIN_CONCURRENCY = 8;

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

/** At most one spare per key on this instance: enough for a client that sends one request at a time. */
export class Spares {
  private readonly byKey = new Map<string, Spare>();
  private readonly placing = new Map<string, Promise<void>>();
  private readonly returning = new Set<Promise<void>>();
  private closed = false;
  readonly counts = { placed: 0, used: 0, returned: 0 };

  /** `giveBack` drops a spare's hold and returns its rpm token; `freed` is told its slot is free here. */
  constructor(private readonly giveBack: (s: Spare) => Promise<void>, private readonly freed: (keyId: string) => void, private readonly ttlMs = SPARE_MS) {}

  /** Whether a spare may be placed for the key now: none there or on its way, and not closing. */
  wants(keyId: string): boolean {
    return !this.closed && !this.byKey.has(keyId) && !this.placing.has(keyId);
  }

  /** Whether the key's spare would admit a request of `amount` under `limits` (a request that will take it does not start early). */
  fits(keyId: string, amount: bigint, limits: string): boolean {
    const s = this.byKey.get(keyId);
    return s !== undefined && s.amount >= amount && s.limits === limits;
  }

  /**
   * The key's spare, out of the pool, when it covers `amount` under the key's limits as they are now.
   * One admitted under limits since changed is given back (the change feed brought a new rpm, ceiling
   * or concurrency: the next admission goes to Redis under them).
   */
  take(keyId: string, amount: bigint, limits: string): Spare | null {
    const s = this.byKey.get(keyId);
    if (!s) return null;
    if (s.limits !== limits) { this.giveUp(s); return null; }
    if (s.amount < amount) return null;
    this.byKey.delete(keyId);
    clearTimeout(s.timer);
    this.counts.used++;
    return s;
  }

  /** Places a spare: `admit` resolves to it once admitted, or to null when refused (or failed). */
  place(keyId: string, admit: () => Promise<Spare | null>): void {
    const p = admit().then((s) => {
      this.placing.delete(keyId);
      if (!s) return;
      this.counts.placed++;
      // Closing meanwhile, or one already there: given back at once.
      if (this.closed || this.byKey.has(keyId)) { this.giveUp(s); return; }
      this.byKey.set(keyId, s);
      s.timer = setTimeout(() => { if (this.byKey.get(keyId) === s) this.giveUp(s); }, this.ttlMs);
      s.timer.unref();
    }, () => { this.placing.delete(keyId); });
    this.placing.set(keyId, p);
  }

  /**
   * The limiter lost a connection or a call failed: no spare is taken until new ones are placed (each by
   * an admission that succeeded since), so requests meanwhile go to admission and fail closed (503) while
   * it is unreachable. Each is given back (retried as a release if that fails too).
   */
  dropAll(): void {
    for (const s of [...this.byKey.values()]) this.giveUp(s);
  }

  /** Gives back every spare, and any still being placed, before the limiter closes. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.placing.values());
    for (const s of [...this.byKey.values()]) this.giveUp(s);
    await Promise.all(this.returning);
  }

  private giveUp(s: Spare): void {
    if (this.byKey.get(s.keyId) === s) this.byKey.delete(s.keyId);
    clearTimeout(s.timer);
    this.counts.returned++;
    this.freed(s.keyId);
    // A give-back that fails leaves the hold to its expiry (the owner's close, or a takeover): only a slot and an amount held longer.
    const p = this.giveBack(s).catch(() => undefined).finally(() => { this.returning.delete(p); });
    this.returning.add(p);
  }
}

// What this instance knows of a key's limits between admissions: enough to tell a request that is far
// from all of them, whose upstream call may then start while Redis places its hold (issue 29).
import type { KeyRecord } from '../store/keys.js';

/** How far is far: the worst case must fit this many times in what the balance and the ceiling have left. */
export const MONEY_MARGIN = 100n;
/** At least this many requests left of the key's rpm at its last admission. */
export const RPM_MARGIN = 20;
/** An rpm reading older than this is not relied on. */
export const SEEN_FOR_MS = 5_000;

interface Seen { remaining: number; at: number; inFlight: number }

/**
 * The admission that matters stays in Redis: every request is admitted or refused there, exactly as
 * before. This view only says when waiting for that answer before calling the upstream would be
 * waiting for a yes: the committed balance and the key's spend (from memory) leave room for the
 * worst case a hundred times over, the key had at least 20 requests of its rpm left at its last
 * admission here (within 5 s), this instance has fewer than half its concurrency in flight, and no
 * per-minute usage limit applies. Anything nearer (a key never admitted here, a drained account, a
 * busy key) waits for Redis first, so a refused request costs an upstream call only when other
 * instances used the room up within those margins.
 */
export class LocalView {
  private readonly seen = new Map<string, Seen>();

  constructor(private readonly now: () => number = Date.now) {}

  far(key: KeyRecord, amount: bigint, balance: bigint, spent: bigint, concurrency: number, quotas: number): boolean {
    if (quotas > 0) return false;
    if (balance < amount * MONEY_MARGIN || balance <= 0n) return false;
    if (key.spendLimit !== null && key.spendLimit - spent < amount * MONEY_MARGIN) return false;
    const s = this.seen.get(key.id);
    if (!s || this.now() - s.at > SEEN_FOR_MS || s.remaining < RPM_MARGIN) return false;
    return (s.inFlight + 1) * 2 <= concurrency;
  }

  /** An admission in Redis said yes, leaving `remaining` of the key's rpm: one more in flight here. */
  admitted(keyId: string, remaining: number): void {
    const s = this.seen.get(keyId);
    if (s) { s.remaining = remaining; s.at = this.now(); s.inFlight++; return; }
    if (this.seen.size >= 50_000) this.seen.clear(); // bounded: a view lost is only a wait
    this.seen.set(keyId, { remaining, at: this.now(), inFlight: 1 });
  }

  /** A hold admitted here closed (settled or released). */
  closed(keyId: string): void {
    const s = this.seen.get(keyId);
    if (s && s.inFlight > 0) s.inFlight--;
  }
}

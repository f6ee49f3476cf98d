// Per-minute usage buckets in process (tokens, characters, audio ms): the memory limiter's twin of the Redis scripts' quota part.
import type { QuotaAsk, QuotaState } from './types.js';

interface Level { v: number; ts: number; limit: number }

/**
 * One bucket per key and dimension, full at `limit` and refilled at `limit` per minute. Admission
 * takes a request's worst case (`need`) only when that much is left; the hold's end gives it back
 * and takes what was used, which may leave a bucket below zero (usage above the worst case): later
 * requests then wait until it has refilled.
 */
export class QuotaBuckets {
  private readonly levels = new Map<string, Level>();

  private level(keyId: string, q: QuotaAsk, now: number): Level {
    const id = `${keyId}:${q.dim}`;
    const l = this.levels.get(id) ?? { v: q.limit, ts: now, limit: q.limit };
    l.v = Math.min(q.limit, l.v + Math.max(0, now - l.ts) * (q.limit / 60_000));
    l.ts = now;
    l.limit = q.limit;
    this.levels.set(id, l);
    return l;
  }

  /** The first limit without `need` left, with the time until it has; null when every one has room. */
  refusal(keyId: string, asks: readonly QuotaAsk[], now: number): { quota: QuotaState; need: number; retryMs: number } | null {
    for (const q of asks) {
      const l = this.level(keyId, q, now);
      if (l.v < q.need) return { quota: state(q.dim, l), need: q.need, retryMs: Math.ceil((q.need - l.v) / (q.limit / 60_000)) };
    }
    return null;
  }

  /** Takes each `need` (no check: admission checked first), returning every bucket's state after. */
  take(keyId: string, asks: readonly QuotaAsk[], now: number): QuotaState[] {
    return asks.map((q) => { const l = this.level(keyId, q, now); l.v -= q.need; return state(q.dim, l); });
  }

  /** Gives back a reservation (capped at full). */
  give(keyId: string, asks: readonly QuotaAsk[], now: number): void {
    for (const q of asks) { const l = this.level(keyId, q, now); l.v = Math.min(q.limit, l.v + q.need); }
  }

  /** Buckets full again for two minutes hold nothing worth keeping. */
  sweep(now: number): void {
    for (const [id, l] of this.levels) if (now - l.ts > 120_000) this.levels.delete(id);
  }
}

function state(dim: QuotaState['dim'], l: Level): QuotaState {
  return { dim, limit: l.limit, remaining: Math.max(0, Math.floor(l.v)), resetMs: Math.max(0, Math.ceil((l.limit - l.v) / (l.limit / 60_000))) };
}

/** `base` plus `sign` times `more`, per dimension (the latest limit kept; none below zero, zeros dropped): a hold's reservation as its session's parts add and free theirs. */
export function mergeAsks(base: readonly QuotaAsk[] | undefined, more: readonly QuotaAsk[], sign: 1 | -1): QuotaAsk[] {
  const out = new Map<QuotaAsk['dim'], QuotaAsk>();
  for (const q of base ?? []) out.set(q.dim, { ...q });
  for (const q of more) {
    const cur = out.get(q.dim) ?? { dim: q.dim, limit: q.limit, need: 0 };
    out.set(q.dim, { dim: q.dim, limit: q.limit, need: Math.max(0, cur.need + sign * q.need) });
  }
  return [...out.values()].filter((q) => q.need > 0);
}

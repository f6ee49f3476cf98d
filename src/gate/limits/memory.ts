// The in-process limiter: the same token bucket and hold rule as the Redis script, for a single instance.
import type { AdmitInput, AdmitOutcome, Limiter } from './types.js';

interface Bucket { tokens: number; ts: number }
interface AccountHolds { total: bigint; byKey: Map<string, { amount: bigint; n: number }>; holds: Map<string, { keyId: string; amount: bigint; exp: number }> }

export class MemoryLimiter implements Limiter {
  readonly kind = 'memory' as const;
  private readonly buckets = new Map<string, Bucket>();
  private readonly accounts = new Map<string, AccountHolds>();
  private sweepAt = Date.now() + 60_000;

  async admit(i: AdmitInput): Promise<AdmitOutcome> {
    return this.admitSync(i, Date.now());
  }

  admitSync(i: AdmitInput, now: number): AdmitOutcome {
    if (now > this.sweepAt) this.sweep(now);
    const acct = this.accounts.get(i.accountId) ?? { total: 0n, byKey: new Map(), holds: new Map() };
    for (const [rid, h] of acct.holds) if (h.exp <= now) this.drop(acct, rid);
    const mine = acct.byKey.get(i.keyId) ?? { amount: 0n, n: 0 };
    if (i.balance - acct.total <= 0n) return { ok: false, reason: 'insufficient_balance' };
    if (i.ceiling !== null && i.periodSpent + mine.amount >= i.ceiling) return { ok: false, reason: 'key_spend_limit_reached' };
    const rate = i.rpm / 60_000;
    const b = this.buckets.get(i.keyId) ?? { tokens: i.rpm, ts: now };
    const tokens = Math.min(i.rpm, b.tokens + (now - b.ts) * rate);
    if (tokens < 1) {
      b.tokens = tokens; b.ts = now; this.buckets.set(i.keyId, b);
      return { ok: false, reason: 'rate_limit_exceeded', remaining: 0, resetMs: Math.ceil((i.rpm - tokens) / rate), retryMs: Math.ceil((1 - tokens) / rate) };
    }
    if (mine.n >= i.concurrency) {
      b.tokens = tokens; b.ts = now; this.buckets.set(i.keyId, b);
      return { ok: false, reason: 'concurrency_limit_exceeded', inFlight: mine.n, remaining: Math.floor(tokens), resetMs: Math.ceil((i.rpm - tokens) / rate) };
    }
    b.tokens = tokens - 1; b.ts = now; this.buckets.set(i.keyId, b);
    mine.amount += i.hold; mine.n += 1;
    acct.byKey.set(i.keyId, mine);
    acct.total += i.hold;
    acct.holds.set(i.requestId, { keyId: i.keyId, amount: i.hold, exp: now + i.ttlMs });
    this.accounts.set(i.accountId, acct);
    return { ok: true, remaining: Math.floor(b.tokens), resetMs: Math.ceil((i.rpm - b.tokens) / rate) };
  }

  async release(accountId: string, requestId: string): Promise<void> {
    const acct = this.accounts.get(accountId);
    if (acct) this.drop(acct, requestId);
  }

  async openHolds(accountId: string): Promise<number> {
    return this.accounts.get(accountId)?.holds.size ?? 0;
  }

  async close(): Promise<void> {}

  private drop(acct: AccountHolds, requestId: string): void {
    const h = acct.holds.get(requestId);
    if (!h) return;
    acct.holds.delete(requestId);
    acct.total -= h.amount;
    const k = acct.byKey.get(h.keyId);
    if (k) { k.amount -= h.amount; k.n -= 1; if (k.n === 0) acct.byKey.delete(h.keyId); }
  }

  private sweep(now: number): void {
    this.sweepAt = now + 60_000;
    for (const [id, b] of this.buckets) if (now - b.ts > 120_000) this.buckets.delete(id);
    for (const [id, a] of this.accounts) if (a.holds.size === 0) this.accounts.delete(id);
  }
}

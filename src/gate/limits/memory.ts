// The in-process limiter: the same admission, hold and pending-debit rules as the Redis scripts, for a single instance.
import type { DebitJournal } from '../../ledger/journal.js';
import type { AdmitInput, AdmitOutcome, CommittedState, ExtendInput, ExtendOutcome, Limiter, MoneyRefusal, PendingDebit, QuotaAsk, QuotaUse } from './types.js';
import { mergeAsks, QuotaBuckets } from './quota.js';

interface Bucket { tokens: number; ts: number }
interface Spend { start: string; spent: bigint; version: bigint }
interface Account {
  /** Open holds plus pending debits. */
  total: bigint;
  byKey: Map<string, { amount: bigint; n: number }>;
  holds: Map<string, { keyId: string; amount: bigint; exp: number; quotas?: QuotaAsk[] }>;
  pending: Map<string, { keyId: string; amount: bigint }>;
  balance: { amount: bigint; version: bigint } | null;
  spends: Map<string, Spend>;
}

export class MemoryLimiter implements Limiter {
  readonly kind = 'memory' as const;
  private readonly buckets = new Map<string, Bucket>();
  private readonly quotas = new QuotaBuckets();
  private readonly accounts = new Map<string, Account>();
  /** Holds with a running record in the journal (released holds must cancel it). */
  private readonly progressed = new Set<string>();
  private sweepAt = Date.now() + 60_000;
  private replayed = false;

  /** Without a journal, a debit between the response and its commit lives only in this process's memory. */
  constructor(private readonly journal: DebitJournal | null = null) {}

  async admit(i: AdmitInput): Promise<AdmitOutcome> {
    return this.admitSync(i, Date.now());
  }

  admitSync(i: AdmitInput, now: number): AdmitOutcome {
    if (now > this.sweepAt) this.sweep(now);
    const acct = this.account(i.accountId);
    // A hold past its deadline is dropped, unless its stream is still running (a running record in the
    // journal): a stream may outlast its hold's life, and keeps its slot and amount until it settles.
    for (const [rid, h] of acct.holds) if (h.exp <= now && !this.progressed.has(rid)) this.drop(acct, rid);
    const mine = acct.byKey.get(i.keyId) ?? { amount: 0n, n: 0 };
    if (i.money) {
      const refused = this.money(acct, i, mine.amount, i.hold);
      if (refused) return refused;
    }
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
    const short = i.quotas?.length ? this.quotas.refusal(i.keyId, i.quotas, now) : null;
    if (short) {
      b.tokens = tokens; b.ts = now; this.buckets.set(i.keyId, b);
      return { ok: false, reason: 'quota_exceeded', ...short, remaining: Math.floor(tokens), resetMs: Math.ceil((i.rpm - tokens) / rate) };
    }
    const quotas = i.quotas?.length ? this.quotas.take(i.keyId, i.quotas, now) : undefined;
    b.tokens = tokens - 1; b.ts = now; this.buckets.set(i.keyId, b);
    mine.amount += i.hold; mine.n += 1;
    acct.byKey.set(i.keyId, mine);
    acct.total += i.hold;
    acct.holds.set(i.holdId, { keyId: i.keyId, amount: i.hold, exp: now + i.ttlMs, ...(i.quotas?.length ? { quotas: i.quotas } : {}) });
    return { ok: true, remaining: Math.floor(b.tokens), resetMs: Math.ceil((i.rpm - b.tokens) / rate), ...(quotas ? { quotas } : {}) };
  }

  async extend(i: ExtendInput): Promise<ExtendOutcome> {
    const acct = this.account(i.accountId);
    const h = acct.holds.get(i.holdId);
    if (!h) return { ok: false, reason: 'missing' };
    const mine = acct.byKey.get(i.keyId) ?? { amount: 0n, n: 0 };
    const refused = this.money(acct, i, mine.amount, i.amount);
    if (refused) return refused;
    const now = Date.now();
    let take: (() => void) | null = null;
    if (i.rpm !== undefined) {
      // A session's billed unit counts as a request: it takes a token of the key's rpm.
      const rate = i.rpm / 60_000;
      const b = this.buckets.get(i.keyId) ?? { tokens: i.rpm, ts: now };
      const tokens = Math.min(i.rpm, b.tokens + (now - b.ts) * rate);
      b.ts = now;
      b.tokens = tokens;
      this.buckets.set(i.keyId, b);
      if (tokens < 1) return { ok: false, reason: 'rate_limit_exceeded', retryMs: Math.ceil((1 - tokens) / rate) };
      take = () => { b.tokens = tokens - 1; };
    }
    if (i.quotas?.length) {
      // The part's worst case under the key's usage limits: refused with nothing taken, or reserved on the hold.
      const short = this.quotas.refusal(i.keyId, i.quotas, now);
      if (short) return { ok: false, reason: 'quota_exceeded', ...short };
      this.quotas.take(i.keyId, i.quotas, now);
      h.quotas = mergeAsks(h.quotas, i.quotas, 1);
    }
    take?.();
    h.amount += i.amount;
    h.exp = Date.now() + i.ttlMs;
    acct.total += i.amount;
    mine.amount += i.amount;
    acct.byKey.set(i.keyId, mine);
    return { ok: true };
  }

  /**
   * The balance and ceiling rule: the newest committed values, less every hold and pending debit,
   * must be above zero; with `cover`, they must also cover `need` (this request's hold).
   */
  private money(acct: Account, i: Pick<AdmitInput, 'keyId' | 'balance' | 'ceiling' | 'spent' | 'cover'>, mine: bigint, need: bigint): MoneyRefusal | null {
    if (!acct.balance || acct.balance.version < i.balance.version) acct.balance = { ...i.balance };
    const field = `${i.spent.period}:${i.keyId}`;
    const cur = acct.spends.get(field);
    if (!cur || cur.start < i.spent.start || (cur.start === i.spent.start && cur.version < i.spent.version)) {
      acct.spends.set(field, { start: i.spent.start, spent: i.spent.amount, version: i.spent.version });
    }
    const s = acct.spends.get(field)!;
    const spent = s.start === i.spent.start ? s.spent : 0n;
    const available = acct.balance.amount - acct.total;
    if (available <= 0n || (i.cover && available < need)) return { ok: false, reason: 'insufficient_balance', available };
    if (i.ceiling === null) return null;
    const left = i.ceiling - spent - mine;
    if (left <= 0n || (i.cover && left < need)) return { ok: false, reason: 'key_spend_limit_reached', available: left };
    return null;
  }

  async release(accountId: string, holdId: string): Promise<void> {
    const acct = this.accounts.get(accountId);
    if (acct) this.drop(acct, holdId);
    if (this.progressed.delete(holdId)) this.journal?.committed([holdId]);
  }

  async settle(holdId: string, d: PendingDebit, final: boolean, covered = d.amount, used?: QuotaUse, freed?: QuotaUse): Promise<void> {
    // The journal line first: once it is written, the debit survives this process.
    this.journal?.record(d.id, d.entry);
    const acct = this.account(d.accountId);
    const again = acct.pending.has(d.id);
    if (!final && !again && freed?.length) this.free(acct, holdId, freed);
    if (final) {
      this.drop(acct, holdId);
      if (this.progressed.delete(holdId) && d.id !== holdId) this.journal?.committed([holdId]);
    } else if (!again) {
      this.shrinkHold(acct, holdId, covered);
    }
    // After the final's refund (in drop): what was used comes off the key's buckets.
    if (used?.length && !again) this.quotas.take(d.keyId, used, Date.now());
    this.addPending(acct, d);
  }

  async shrink(accountId: string, holdId: string, amount: bigint, freed?: QuotaUse): Promise<void> {
    const acct = this.account(accountId);
    if (freed?.length) this.free(acct, holdId, freed);
    this.shrinkHold(acct, holdId, amount);
  }

  /** Gives a part's usage reservation back to the key's buckets and takes it off its hold's record. */
  private free(acct: Account, holdId: string, freed: QuotaUse): void {
    const h = acct.holds.get(holdId);
    if (!h) return;
    this.quotas.give(h.keyId, freed, Date.now());
    const left = mergeAsks(h.quotas, freed, -1);
    if (left.length) h.quotas = left; else delete h.quotas;
  }

  /** Takes `amount` off an open hold (a part settled the stretch it covered), never below zero. */
  private shrinkHold(acct: Account, holdId: string, amount: bigint): void {
    const h = acct.holds.get(holdId);
    if (!h || amount <= 0n) return;
    const off = amount < h.amount ? amount : h.amount;
    h.amount -= off;
    acct.total -= off;
    const k = acct.byKey.get(h.keyId);
    if (k) k.amount -= off;
  }

  async progress(holdId: string, d: PendingDebit): Promise<void> {
    if (!this.journal) return;
    this.journal.record(holdId, d.entry);
    this.progressed.add(holdId);
  }

  async committed(accountId: string, ids: string[], state: CommittedState): Promise<void> {
    const acct = this.account(accountId);
    for (const id of ids) {
      const p = acct.pending.get(id);
      if (!p) continue;
      acct.pending.delete(id);
      acct.total -= p.amount;
      const k = acct.byKey.get(p.keyId);
      if (k) { k.amount -= p.amount; if (k.n === 0 && k.amount === 0n) acct.byKey.delete(p.keyId); }
    }
    if (state.balance && (!acct.balance || acct.balance.version < state.balance.version)) acct.balance = { ...state.balance };
    for (const s of state.spends) {
      const field = `${s.period}:${s.keyId}`;
      const cur = acct.spends.get(field);
      if (!cur || cur.start < s.start || (cur.start === s.start && cur.version < s.version)) acct.spends.set(field, { start: s.start, spent: s.spent, version: s.version });
    }
    this.journal?.committed(ids);
  }

  /** The journal's leftovers from this data dir's previous run, once: they count as pending until committed. */
  async claimOrphans(): Promise<PendingDebit[]> {
    if (this.replayed || !this.journal) return [];
    this.replayed = true;
    const out: PendingDebit[] = [];
    for (const [id, entry] of this.journal.leftovers()) {
      const e = JSON.parse(entry) as { accountId: string; keyId: string | null; amount: string };
      const d = { id, accountId: e.accountId, keyId: e.keyId ?? '', amount: BigInt(e.amount), entry };
      this.addPending(this.account(d.accountId), d);
      out.push(d);
    }
    return out;
  }

  async pendingOf(accountId: string, keyId: string): Promise<{ account: bigint; key: bigint }> {
    const acct = this.accounts.get(accountId);
    let account = 0n;
    let key = 0n;
    for (const p of acct?.pending.values() ?? []) { account += p.amount; if (p.keyId === keyId) key += p.amount; }
    return { account, key };
  }

  async openHolds(accountId: string): Promise<number> {
    return this.accounts.get(accountId)?.holds.size ?? 0;
  }

  async close(): Promise<void> {
    this.journal?.close();
  }

  private account(id: string): Account {
    let a = this.accounts.get(id);
    if (!a) {
      a = { total: 0n, byKey: new Map(), holds: new Map(), pending: new Map(), balance: null, spends: new Map() };
      this.accounts.set(id, a);
    }
    return a;
  }

  private addPending(acct: Account, d: PendingDebit): void {
    const prior = acct.pending.get(d.id);
    if (prior) { acct.total -= prior.amount; const k = acct.byKey.get(prior.keyId); if (k) k.amount -= prior.amount; }
    acct.pending.set(d.id, { keyId: d.keyId, amount: d.amount });
    acct.total += d.amount;
    const k = acct.byKey.get(d.keyId) ?? { amount: 0n, n: 0 };
    k.amount += d.amount;
    acct.byKey.set(d.keyId, k);
  }

  private drop(acct: Account, holdId: string): void {
    const h = acct.holds.get(holdId);
    if (!h) return;
    acct.holds.delete(holdId);
    if (h.quotas) this.quotas.give(h.keyId, h.quotas, Date.now());
    acct.total -= h.amount;
    const k = acct.byKey.get(h.keyId);
    if (k) { k.amount -= h.amount; k.n -= 1; if (k.n === 0 && k.amount === 0n) acct.byKey.delete(h.keyId); }
  }

  private sweep(now: number): void {
    this.sweepAt = now + 60_000;
    for (const [id, b] of this.buckets) if (now - b.ts > 120_000) this.buckets.delete(id);
    this.quotas.sweep(now);
    for (const [id, a] of this.accounts) if (a.holds.size === 0 && a.pending.size === 0) this.accounts.delete(id);
  }
}

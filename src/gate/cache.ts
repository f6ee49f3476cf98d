// In-memory mirrors of keys, balances and period spend, kept current by settles and a change-feed poll.
import type { Db } from '../store/db.js';
import { allKeys, keyByHash, keysChangedSince, type KeyRecord } from '../store/keys.js';
import { accountById, accountsChangedSince, keySpend } from '../store/accounts.js';
import type { Nanodollars } from '../money.js';
import { periodStarts } from '../store/periods.js';
import type { SettleListener } from '../ledger/settle.js';

interface SpendEntry { start: string; spent: bigint; version: bigint }
interface KeySpendState { day: SpendEntry; month: SpendEntry }
export interface SpendState { period: 'day' | 'month'; start: string; amount: bigint; version: bigint }

export const SYNC_INTERVAL_MS = 400;
const NEGATIVE_TTL_MS = 1000;
/**
 * Every key is in memory (loaded at start, kept current by the change feed), so an unknown key is
 * answered from memory. Only a key made in the last moments on another instance can be missing:
 * those few are looked up in the store, at most this many a second (a flood of made-up keys costs
 * no more than that).
 */
const MISS_LOOKUPS_PER_SEC = 20;

export class StateCache implements SettleListener {
  private readonly byHash = new Map<string, KeyRecord>();
  private readonly byId = new Map<string, KeyRecord>();
  private readonly unknown = new Map<string, number>();
  private readonly balances = new Map<string, { balance: bigint; version: bigint }>();
  private readonly spends = new Map<string, KeySpendState>();
  private keyVersion = 0n;
  private missBudget = { tokens: MISS_LOOKUPS_PER_SEC, at: Date.now() };
  private readonly lookups = new Map<string, Promise<KeyRecord | null>>();
  /** Store lookups of hashes not in memory (for tests and metrics). */
  missLookups = 0;
  private acctVersion = 0n;
  private spendVersion = 0n;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly db: Db) {}

  /** Authenticates a key hash from memory; a hash not in memory costs a query only within a small budget a second. */
  async keyForHash(hash: string): Promise<KeyRecord | null> {
    const hit = this.byHash.get(hash);
    if (hit) return hit;
    const now = Date.now();
    const neg = this.unknown.get(hash);
    if (neg !== undefined && neg > now) return null;
    const b = this.missBudget;
    b.tokens = Math.min(MISS_LOOKUPS_PER_SEC, b.tokens + ((now - b.at) * MISS_LOOKUPS_PER_SEC) / 1000);
    b.at = now;
    // Concurrent requests with one new key share one lookup.
    const pending = this.lookups.get(hash);
    if (pending) return pending;
    if (b.tokens < 1) return null;
    b.tokens -= 1;
    this.missLookups++;
    const lookup = this.lookup(hash).finally(() => this.lookups.delete(hash));
    this.lookups.set(hash, lookup);
    return lookup;
  }

  private async lookup(hash: string): Promise<KeyRecord | null> {
    const rec = await keyByHash(this.db, hash);
    if (!rec) {
      if (this.unknown.size > 10_000) this.unknown.clear();
      this.unknown.set(hash, Date.now() + NEGATIVE_TTL_MS);
      return null;
    }
    this.putKey(rec);
    return rec;
  }

  putKey(rec: KeyRecord): void {
    const cur = this.byId.get(rec.id);
    if (cur && cur.version > rec.version) return;
    this.byId.set(rec.id, rec);
    this.byHash.set(rec.hash, rec);
    this.unknown.delete(rec.hash);
  }

  async balanceOf(accountId: string): Promise<bigint> {
    return (await this.balanceState(accountId)).amount;
  }

  /** The committed balance this instance knows, with the version that orders it against other instances' views. */
  balanceState(accountId: string): { amount: bigint; version: bigint } | Promise<{ amount: bigint; version: bigint }> {
    const hit = this.balances.get(accountId);
    // From memory without a promise: every admission asks.
    if (hit) return { amount: hit.balance, version: hit.version };
    return this.loadBalance(accountId);
  }

  private async loadBalance(accountId: string): Promise<{ amount: bigint; version: bigint }> {
    let hit = this.balances.get(accountId);
    if (!hit) {
      const acct = await accountById(this.db, accountId);
      this.balance(accountId, (acct?.balance ?? 0n) as Nanodollars, acct?.version ?? 0n);
      hit = this.balances.get(accountId)!;
    }
    return { amount: hit.balance, version: hit.version };
  }

  /** The key's committed spend in the current UTC day or month, with its period start and version. */
  spendState(keyId: string, period: 'day' | 'month', now = new Date()): SpendState | Promise<SpendState> {
    if (!this.spends.has(keyId)) return this.spendOf(keyId, now).then(() => this.spendState(keyId, period, now));
    const cur = periodStarts(now)[period];
    const e = this.spends.get(keyId)![period];
    return e.start === cur ? { period, start: cur, amount: e.spent, version: e.version } : { period, start: cur, amount: 0n, version: 0n };
  }

  /** This key's spend in its current UTC day and month. */
  async spendOf(keyId: string, now = new Date()): Promise<{ day: bigint; month: bigint }> {
    const { day, month } = periodStarts(now);
    let s = this.spends.get(keyId);
    if (!s) {
      const fromDb = (await keySpend(this.db, [keyId], now)).get(keyId)!;
      s = this.spends.get(keyId) ?? { day: { start: day, spent: fromDb.day, version: fromDb.dayVersion }, month: { start: month, spent: fromDb.month, version: fromDb.monthVersion } };
      this.spends.set(keyId, s);
    }
    return { day: s.day.start === day ? s.day.spent : 0n, month: s.month.start === month ? s.month.spent : 0n };
  }

  balance(accountId: string, balance: Nanodollars, version: bigint): void {
    const cur = this.balances.get(accountId);
    if (!cur || cur.version <= version) this.balances.set(accountId, { balance, version });
  }

  spend(keyId: string, period: 'day' | 'month', start: string, spent: Nanodollars, version: bigint): void {
    const s = this.spends.get(keyId);
    if (!s) return; // not mirrored here: read from the store on first use
    const cur = s[period];
    if (start > cur.start || (start === cur.start && version >= cur.version)) s[period] = { start, spent, version };
  }

  /** Loads every key, and starts the change feed at the store's present position. */
  async init(): Promise<void> {
    const res = await this.db.query(`SELECT coalesce((SELECT max(version) FROM api_keys), 0) AS k,
      coalesce((SELECT max(version) FROM accounts), 0) AS a, coalesce((SELECT max(version) FROM key_spend), 0) AS s`);
    const r = res.rows[0]!;
    this.keyVersion = r.k as bigint; this.acctVersion = r.a as bigint; this.spendVersion = r.s as bigint;
    for (const k of await allKeys(this.db)) this.putKey(k);
  }

  /** Polls the change feed so revocations, limit changes, credits and other instances' spend show within a second. */
  start(): void {
    const tick = async () => {
      try { await this.sync(); } catch { /* the store is briefly unreachable: keep serving from memory, retry next tick */ }
      this.timer = setTimeout(tick, SYNC_INTERVAL_MS);
      this.timer.unref();
    };
    this.timer = setTimeout(tick, SYNC_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
  }

  async sync(): Promise<void> {
    for (const rec of await keysChangedSince(this.db, this.keyVersion)) {
      if (rec.version > this.keyVersion) this.keyVersion = rec.version;
      this.putKey(rec);
    }
    for (const a of await accountsChangedSince(this.db, this.acctVersion)) {
      if (a.version > this.acctVersion) this.acctVersion = a.version;
      if (this.balances.has(a.id)) this.balance(a.id, a.balance, a.version);
    }
    const res = await this.db.query(
      `SELECT key_id, period, to_char(period_start, 'YYYY-MM-DD') AS start, spent_nd, version FROM key_spend
        WHERE version > $1 OR updated_at > clock_timestamp() - interval '2 seconds'`, [this.spendVersion]);
    for (const r of res.rows) {
      const v = r.version as bigint;
      if (v > this.spendVersion) this.spendVersion = v;
      this.spend(r.key_id as string, r.period as 'day' | 'month', r.start as string, r.spent_nd as Nanodollars, v);
    }
  }
}

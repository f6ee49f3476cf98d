// In-memory mirrors of keys, realtime client secrets, balances and period spend, kept current by settles and a change-feed poll.
import type { Db } from '../store/db.js';
import { allKeys, keyByHash, keysChangedSince, type KeyRecord } from '../store/keys.js';
import { liveSecrets, secretsChangedSince, type SecretRecord } from '../store/realtime-secrets.js';
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
 * those few are looked up in the store, at most this many a second; past that, a miss waits for the
 * next read of the key feed (MISS_FEED_READ_MS). A flood of made-up keys costs no more than both.
 */
const MISS_LOOKUPS_PER_SEC = 20;
/**
 * A miss that is not looked up on its own (a realtime client secret, or a key past the lookup budget)
 * waits for the next read of its feed; those reads start at most this often, however many misses wait.
 */
const MISS_FEED_READ_MS = 100;
/** An expired secret stays in memory this long, so that it is refused as expired (not unknown); store/realtime-secrets.ts reads as far back. */
export const EXPIRED_SECRETS_KEPT_MS = 3_600_000;

export class StateCache implements SettleListener {
  private readonly byHash = new Map<string, KeyRecord>();
  private readonly byId = new Map<string, KeyRecord>();
  private readonly unknown = new Map<string, number>();
  private readonly balances = new Map<string, { balance: bigint; version: bigint }>();
  private readonly spends = new Map<string, KeySpendState>();
  private keyVersion = 0n;
  private missBudget = { tokens: MISS_LOOKUPS_PER_SEC, at: Date.now() };
  private readonly lookups = new Map<string, Promise<KeyRecord | null>>();
  /** Realtime client secrets by hash: the live ones, and those expired within EXPIRED_SECRETS_KEPT_MS (dropped at each poll past that). */
  private readonly secrets = new Map<string, SecretRecord>();
  private secretVersion = 0n;
  private readonly secretFeed = new FeedRead(() => this.syncSecrets());
  private readonly keyFeed = new FeedRead(() => this.syncKeys());
  /** Who follows a key (an open session): told when the feed shows it revoked. */
  private readonly keyWatchers = new Map<string, Set<(rec: KeyRecord) => void>>();
  /** Single-key lookups made for hashes not in memory. */
  private keyLookups = 0;
  private acctVersion = 0n;
  private spendVersion = 0n;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly db: Db) {}

  /** Store reads for hashes not in memory, single-key lookups and feed reads alike (for tests and metrics). */
  get missLookups(): number {
    return this.keyLookups + this.keyFeed.reads + this.secretFeed.reads;
  }

  /**
   * Authenticates a key hash from memory. A hash not in memory costs a query of its own within a small
   * budget a second; past it, the answer waits for the next read of the key feed (a key made a moment
   * ago elsewhere is found there, even while a flood of made-up keys spends the budget).
   */
  async keyForHash(hash: string): Promise<KeyRecord | null> {
    const hit = this.byHash.get(hash);
    if (hit) return hit;
    const neg = this.unknown.get(hash);
    if (neg !== undefined && neg > Date.now()) return null;
    // Concurrent requests with one new key share one lookup.
    const pending = this.lookups.get(hash);
    if (pending) return pending;
    if (!this.takeMiss()) {
      await this.keyFeed.next();
      return this.byHash.get(hash) ?? null;
    }
    const lookup = this.lookup(hash).finally(() => this.lookups.delete(hash));
    this.lookups.set(hash, lookup);
    return lookup;
  }

  /** A store lookup of a key not in memory may be made now (MISS_LOOKUPS_PER_SEC); counted. */
  private takeMiss(): boolean {
    const now = Date.now();
    const b = this.missBudget;
    b.tokens = Math.min(MISS_LOOKUPS_PER_SEC, b.tokens + ((now - b.at) * MISS_LOOKUPS_PER_SEC) / 1000);
    b.at = now;
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    this.keyLookups++;
    return true;
  }

  /**
   * A realtime client secret by hash, from memory as keys are: every live secret is mirrored (loaded
   * at start, then by the change feed), so a made-up one costs no query of its own. A secret minted in
   * the last moments on another instance may not be here yet: a miss waits for the next read of the
   * secret feed, which runs at most every SECRET_REFRESH_MS however many misses wait on it (a flood of
   * made-up secrets costs at most that many statements a second, and remembers nothing).
   */
  async secretForHash(hash: string): Promise<SecretRecord | null> {
    const hit = this.secrets.get(hash);
    if (hit) return hit;
    await this.secretFeed.next();
    return this.secrets.get(hash) ?? null;
  }

  private async syncSecrets(): Promise<void> {
    for (const x of await secretsChangedSince(this.db, this.secretVersion)) {
      if (x.version > this.secretVersion) this.secretVersion = x.version;
      this.putSecret(x);
    }
  }

  /** A secret minted (here, or seen on the feed). */
  putSecret(rec: SecretRecord): void {
    if (rec.expiresAt + EXPIRED_SECRETS_KEPT_MS <= Date.now()) return;
    this.secrets.set(rec.hash, rec);
  }

  /** The key as the gateway knows it now (a session's key may since have been revoked or had its limits changed). */
  keyById(id: string): KeyRecord | undefined {
    return this.byId.get(id);
  }

  /**
   * Calls `revoked` when the change feed (or this instance) shows the key revoked; at once (next tick)
   * when it already is. Returns the function that stops watching.
   */
  watchKey(keyId: string, revoked: (rec: KeyRecord) => void): () => void {
    let set = this.keyWatchers.get(keyId);
    if (!set) { set = new Set(); this.keyWatchers.set(keyId, set); }
    set.add(revoked);
    const now = this.byId.get(keyId);
    if (now?.revokedAt) queueMicrotask(() => { if (set.has(revoked)) revoked(now); });
    return () => {
      set.delete(revoked);
      if (set.size === 0 && this.keyWatchers.get(keyId) === set) this.keyWatchers.delete(keyId);
    };
  }

  private remember(hash: string): void {
    if (this.unknown.size > 10_000) this.unknown.clear();
    this.unknown.set(hash, Date.now() + NEGATIVE_TTL_MS);
  }

  private async lookup(hash: string): Promise<KeyRecord | null> {
    const rec = await keyByHash(this.db, hash);
    if (!rec) {
      this.remember(hash);
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
    if (rec.revokedAt && !cur?.revokedAt) for (const w of [...this.keyWatchers.get(rec.id) ?? []]) w(rec);
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

  /**
   * The committed balance and the key's committed spend in its period, only if both are in memory: it
   * never starts a load (a load started and left unawaited would reject unhandled with the store down).
   */
  cachedMoney(accountId: string, keyId: string, period: 'day' | 'month', now = new Date()): { balance: bigint; spent: bigint } | undefined {
    const hit = this.balances.get(accountId);
    if (!hit || !this.spends.has(keyId)) return undefined;
    const spent = this.spendState(keyId, period, now) as SpendState; // in memory: no promise
    return { balance: hit.balance, spent: spent.amount };
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
      coalesce((SELECT max(version) FROM accounts), 0) AS a, coalesce((SELECT max(version) FROM key_spend), 0) AS s,
      coalesce((SELECT max(version) FROM realtime_secrets), 0) AS e`);
    const r = res.rows[0]!;
    this.keyVersion = r.k as bigint; this.acctVersion = r.a as bigint; this.spendVersion = r.s as bigint; this.secretVersion = r.e as bigint;
    for (const k of await allKeys(this.db)) this.putKey(k);
    for (const x of await liveSecrets(this.db)) this.putSecret(x);
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

  private async syncKeys(): Promise<void> {
    for (const rec of await keysChangedSince(this.db, this.keyVersion)) {
      if (rec.version > this.keyVersion) this.keyVersion = rec.version;
      this.putKey(rec);
    }
  }

  async sync(): Promise<void> {
    await this.syncKeys();
    await this.syncSecrets();
    const now = Date.now();
    for (const [h, x] of this.secrets) if (x.expiresAt + EXPIRED_SECRETS_KEPT_MS <= now) this.secrets.delete(h);
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

/**
 * Reads of one change feed made for misses: `next()` resolves once a read that started after the call
 * has ended. Reads start at most every MISS_FEED_READ_MS, one at a time, and every miss waiting joins
 * the same read, so a flood of misses costs at most that many statements a second and keeps nothing.
 * A read that fails (the store unreachable) leaves the miss unknown for now (401).
 */
class FeedRead {
  private upcoming: Promise<void> | null = null;
  private running: Promise<void> = Promise.resolve();
  private startedAt = 0;
  /** Reads started. */
  reads = 0;

  constructor(private readonly read: () => Promise<void>) {}

  next(): Promise<void> {
    this.upcoming ??= (async () => {
      await this.running;
      const wait = this.startedAt + MISS_FEED_READ_MS - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      this.upcoming = null; // a miss from now on needs a read that starts after it
      this.startedAt = Date.now();
      this.reads++;
      this.running = this.read().catch(() => undefined);
      await this.running;
    })();
    return this.upcoming;
  }
}

// Commits priced debits to the ledger after their responses are out, in the settler's group commits, retrying until they land.
import { createHash } from 'node:crypto';
import type { Db } from '../store/db.js';
import { PoisonEntryError, serializeEntry, type Settler, type LedgerEntry, type SettleResult } from '../ledger/settle.js';
import { parkDebit } from '../store/parked.js';
import type { CommittedState, Limiter, PendingDebit } from '../gate/limits/types.js';
import { periodStarts } from '../store/periods.js';
import { log } from '../observe/log.js';

const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 5_000;
/** A ledger key longer than this is stored as its hash when PostgreSQL refuses it (its btree limit is 2,704 bytes). */
const LONG_KEY_BYTES = 512;

/**
 * A debit reaches here once it is durable (in Redis, or in the journal): nothing waits on the
 * commit but the limiter's record of it, which moves from "pending" to "committed" when it lands.
 * A commit that fails (PostgreSQL unreachable) is retried with backoff; the debit keeps counting
 * against the balance and the ceiling meanwhile, and is never dropped.
 *
 * A debit PostgreSQL refuses for its content (the settler commits the rest of its group without it)
 * is not retried: one whose ledger key is too long is stored under the key's hash; any other is
 * parked in `parked_debits` with the error, logged at error level and counted for /metrics
 * (`tollgate_parked_debits_total`), and leaves the pending record. No other debit waits on it.
 */
export class Committer {
  private inFlight = 0;
  /** Debits in flight by account, and who waits for an account's to land. */
  private readonly byAccount = new Map<string, number>();
  private readonly waiters = new Map<string, (() => void)[]>();
  private failing = 0;
  private closed = false;
  /** Commit attempts that failed (each retried): a counter for /metrics. */
  commitsFailed = 0;
  /** Debits the ledger refused for their content, parked for an operator: a counter for /metrics (an alert above 0). */
  parked = 0;

  constructor(private readonly settler: Settler, private readonly limiter: Limiter, private readonly db: Db) {}

  /** Debits recorded and not yet committed by this instance. */
  get pending(): number { return this.inFlight; }

  /** Debits whose last commit attempt failed. */
  get retrying(): number { return this.failing; }

  enqueue(debit: PendingDebit, entry: LedgerEntry): void {
    this.track(debit.accountId);
    void this.attempt(debit, entry, 0);
  }

  /** Counts a debit in flight until `landed` (the one place both ways in are counted). */
  private track(accountId: string): void {
    this.inFlight++;
    this.byAccount.set(accountId, (this.byAccount.get(accountId) ?? 0) + 1);
  }

  /**
   * Resolves once this instance's debits of the account handed in so far have committed and left
   * the limiter's pending record (or after `maxMs`): from then on, the ledger's figures less the
   * limiter's pending ones count each of them exactly once.
   */
  settled(accountId: string, maxMs = 100): Promise<void> {
    if (!this.byAccount.has(accountId)) return Promise.resolve();
    this.settler.hurry();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, maxMs);
      const list = this.waiters.get(accountId) ?? [];
      list.push(() => { clearTimeout(timer); resolve(); });
      this.waiters.set(accountId, list);
    });
  }

  private landed(accountId: string): void {
    this.inFlight--;
    const n = (this.byAccount.get(accountId) ?? 1) - 1;
    if (n > 0) { this.byAccount.set(accountId, n); return; }
    this.byAccount.delete(accountId);
    for (const w of this.waiters.get(accountId) ?? []) w();
    this.waiters.delete(accountId);
  }

  private async attempt(debit: PendingDebit, entry: LedgerEntry, tries: number): Promise<void> {
    let result: SettleResult;
    try {
      result = await this.settler.submit(entry);
    } catch (e) {
      if (e instanceof PoisonEntryError) { if (tries > 0) this.failing--; await this.refused(debit, entry, e, 0); return; }
      this.commitsFailed++;
      if (tries === 0) this.failing++;
      if (tries === 0 || tries % 20 === 0) log('warn', 'debit commit failed; retrying', { debit: debit.id, tries: tries + 1, error: String((e as Error)?.message ?? e) });
      const wait = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.min(tries, 5));
      setTimeout(() => { void this.attempt(debit, entry, tries + 1); }, this.closed ? 50 : wait).unref();
      return;
    }
    if (tries > 0) this.failing--;
    await this.clear(debit, entry, result, 0);
  }

  /**
   * The ledger refused this entry for its content. A key too long for its index is stored as its
   * hash (the same nonce: a recovery of the same debit lands on the same row); otherwise, or if that
   * is refused too, the debit is parked. Either way it then leaves the pending record.
   */
  private async refused(debit: PendingDebit, entry: LedgerEntry, e: PoisonEntryError, tries: number): Promise<void> {
    if (Buffer.byteLength(entry.idemKey) > LONG_KEY_BYTES) {
      const hashed = { ...entry, idemKey: `sha256:${createHash('sha256').update(entry.idemKey).digest('hex')}` };
      try {
        const result = await this.settler.submit(hashed);
        log('warn', 'debit ledger key too long; stored under its hash', { debit: debit.id.slice(0, 200), idem_key: hashed.idemKey });
        await this.clear(debit, hashed, result, 0);
        return;
      } catch (again) {
        if (!(again instanceof PoisonEntryError)) return this.retryRefused(debit, entry, e, tries);
      }
    }
    try {
      await parkDebit(this.db, { accountId: entry.accountId, amount: entry.amount, entry: serializeEntry(entry), error: e.message });
    } catch {
      return this.retryRefused(debit, entry, e, tries);
    }
    this.parked++;
    log('error', 'debit refused by the ledger; parked for an operator (parked_debits)', {
      debit: debit.id.slice(0, 200), account: entry.accountId, amount_nd: entry.amount.toString(), error: e.message });
    await this.clear(debit, entry, null, 0);
  }

  private retryRefused(debit: PendingDebit, entry: LedgerEntry, e: PoisonEntryError, tries: number): void {
    const wait = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.min(tries, 5));
    setTimeout(() => { void this.refused(debit, entry, e, tries + 1); }, this.closed ? 50 : wait).unref();
  }

  /** Takes the committed debit off the limiter's pending record, retrying until it can (it counts against the balance until then). */
  private async clear(debit: PendingDebit, entry: LedgerEntry, result: SettleResult | null, tries: number): Promise<void> {
    try {
      const state = result && result.balance !== null ? stateOf(result, entry.keyId) : await currentState(this.db, entry.accountId, entry.keyId);
      await this.limiter.committed(debit.accountId, [debit.id], state);
    } catch (e) {
      if (tries === 0) log('warn', 'committed debit not yet cleared from the limiter; retrying', { debit: debit.id, error: String((e as Error)?.message ?? e) });
      const wait = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.min(tries, 5));
      setTimeout(() => { void this.clear(debit, entry, null, tries + 1); }, this.closed ? 50 : wait).unref();
      return;
    }
    this.landed(debit.accountId);
  }

  /**
   * Commits one entry with the caller waiting (when no durable record could be written first). The
   * record may have been written all the same, its answer lost: it is cleared from the limiter after.
   */
  async commitNow(debit: PendingDebit, entry: LedgerEntry): Promise<void> {
    const result = await this.settler.submit(entry);
    this.track(debit.accountId);
    void this.clear(debit, entry, result, 0);
  }

  /** Resolves once every debit handed in so far has committed, or the deadline passed (they stay durable). */
  async drain(deadline: number): Promise<boolean> {
    this.closed = true;
    while (this.inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    return this.inFlight === 0;
  }
}

function stateOf(r: SettleResult, keyId: string | null): CommittedState {
  return {
    balance: r.balance !== null && r.version !== null ? { amount: r.balance, version: r.version } : null,
    spends: keyId ? r.spends.map((s) => ({ keyId, period: s.period, start: s.start, spent: s.spent, version: s.version })) : [],
  };
}

/** The account's and key's committed state read back (a debit that was in the ledger already moved nothing this time). */
async function currentState(db: Db, accountId: string, keyId: string | null): Promise<CommittedState> {
  const a = await db.query('SELECT balance_nd, version FROM accounts WHERE id = $1', [accountId]);
  const row = a.rows[0];
  const spends: CommittedState['spends'] = [];
  if (keyId) {
    const { day, month } = periodStarts(new Date());
    const s = await db.query(`SELECT period, to_char(period_start, 'YYYY-MM-DD') AS start, spent_nd, version FROM key_spend
      WHERE key_id = $1 AND ((period = 'day' AND period_start = $2) OR (period = 'month' AND period_start = $3))`, [keyId, day, month]);
    for (const r of s.rows) spends.push({ keyId, period: r.period as 'day' | 'month', start: r.start as string, spent: r.spent_nd as bigint, version: r.version as bigint });
  }
  return { balance: row ? { amount: row.balance_nd as bigint, version: row.version as bigint } : null, spends };
}

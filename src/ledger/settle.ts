// Writes ledger entries idempotently in group commits; balance and period spend move in the same transaction.
import type { Db, Queryable } from '../store/db.js';
import type { Nanodollars } from '../money.js';

export interface LedgerEntry {
  idemKey: string;          // the request id (debits) or the payment/session id (credits)
  nonce: string;            // unique per attempt: tells a retried settle from a reused client request id
  accountId: string;
  keyId: string | null;
  kind: 'credit' | 'debit';
  amount: Nanodollars;      // magnitude, >= 0
  reason: string;
  model?: string | null;
  usage?: unknown;
  at?: Date;
}

export interface SettleResult {
  applied: boolean;               // false when the same entry (same nonce) was already in the ledger
  idemKey: string;                // the key it was stored under
  balance: Nanodollars | null;    // the account's balance after this commit (null when the commit did not move it)
  version: bigint | null;         // the account row's version after this commit
  /** The entry's key's day and month spend after this commit (empty when it did not move them). */
  spends: { period: 'day' | 'month'; start: string; spent: Nanodollars; version: bigint }[];
}

/** A ledger entry as text (amount as a decimal string): what a pending debit carries until it commits. */
export function serializeEntry(e: LedgerEntry): string {
  // Written field by field (no copy of the entry): JSON.stringify leaves out a model or usage that is undefined.
  return JSON.stringify({ idemKey: e.idemKey, nonce: e.nonce, accountId: e.accountId, keyId: e.keyId, kind: e.kind, amount: e.amount.toString(),
    reason: e.reason, model: e.model, usage: e.usage, at: (e.at ?? new Date()).toISOString() });
}

export function parseEntry(text: string): LedgerEntry {
  const o = JSON.parse(text) as Omit<LedgerEntry, 'amount' | 'at'> & { amount: string; at: string };
  return { ...o, amount: BigInt(o.amount) as Nanodollars, at: new Date(o.at) };
}

export interface SettleListener {
  balance(accountId: string, balance: Nanodollars, version: bigint): void;
  spend(keyId: string, period: 'day' | 'month', start: string, spent: Nanodollars, version: bigint): void;
}

interface Pending { entry: LedgerEntry; resolve: (r: SettleResult) => void; reject: (e: unknown) => void }

/**
 * One entry PostgreSQL refuses for what it holds (a key past the btree limit, a value out of range,
 * text it cannot store), found by committing its group in halves: the rest of the group committed
 * without it, and retrying it cannot succeed. The committer parks it.
 */
export class PoisonEntryError extends Error {
  constructor(override readonly cause: unknown) {
    super(`the ledger refuses this entry: ${String((cause as Error)?.message ?? cause)}`);
  }
}

/**
 * An error of the entries themselves, not of the connection or the server: SQLSTATE class 22 (data
 * exception), 23 (integrity constraint) or 54 (program limit exceeded, e.g. an index row too large).
 */
export function isEntryError(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^(22|23|54)[0-9A-Z]{3}$/.test(code);
}

const MAX_BATCH = 512;
/** How long after the debit that makes a paced commit due it starts (Settler.schedule). */
const AFTER_RESPONSE_MS = 1;

export class Settler {
  private queue: Pending[] = [];
  private flushing = false;
  private scheduled = false;
  writes = 0;
  commits = 0;

  private lastStart = -Infinity;
  private timer: NodeJS.Timeout | undefined;
  /** A reader waits for the queued debits (hurry): the next commit does not wait for the pace. */
  private urgent = false;

  /** `paceMs`: the least time between the starts of two group commits (see schedule). */
  constructor(private readonly db: Db, private readonly listener: SettleListener, private readonly paceMs = 0) {}

  /** Queues an entry; resolves once the transaction that holds it has committed. */
  submit(entry: LedgerEntry): Promise<SettleResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ entry, resolve, reject });
      this.schedule();
    });
  }

  get pending(): number { return this.queue.length + (this.flushing ? 1 : 0); }

  /** Resolves when everything submitted so far has committed (used by shutdown). */
  async drain(): Promise<void> {
    while (this.queue.length > 0 || this.flushing) await new Promise((r) => setTimeout(r, 5));
  }

  /**
   * A group commit starts on the next turn when none started in the last `paceMs`: under load every
   * turn's debits go together anyway, and one request at a time no longer costs a PostgreSQL round trip
   * each (its wake-ups cost the next request CPU and time on a 2-core machine: docs/benchmarks.md, "The
   * sequential p99"). Within the pace, the debits wait for the first one submitted after it, and the commit
   * starts a millisecond after that one, once its response has reached the client: in the pause before a
   * lone client's next request, not at a timer's moment in the middle of one (docs/benchmarks.md, "Commits
   * after a response"); a trickle's last debit waits at most one pace more (a timer). A full batch waiting,
   * or a reader waiting (hurry), starts one on the next turn: the pace is for a trickle, never a cap on
   * throughput. No response waits on a commit; the ledger lags by at most two paces.
   */
  private schedule(): void {
    if (this.flushing || this.queue.length === 0) return;
    const nextTurn = this.queue.length >= MAX_BATCH || this.urgent;
    const wait = this.lastStart + this.paceMs - performance.now();
    if (nextTurn || wait <= 0) {
      if (this.timer) { clearTimeout(this.timer); this.timer = undefined; }
      if (!this.scheduled) {
        this.scheduled = true;
        // Otherwise a millisecond on, once the response that submitted this debit has reached its client
        // (started at once, the commit's queries woke PostgreSQL while the client was still to read it,
        // and delayed it on two cores).
        if (nextTurn) setImmediate(this.run);
        else setTimeout(this.run, AFTER_RESPONSE_MS);
      }
      return;
    }
    if (!this.timer) this.timer = setTimeout(this.run, wait + this.paceMs);
  }

  /**
   * Starts the waiting group commit at once, pace or not: someone reads the ledger and waits for this
   * instance's debits to land (Committer.settled), so they need not wait out the pace.
   */
  hurry(): void {
    if (this.queue.length === 0) return;
    this.urgent = true;
    this.schedule();
  }

  private readonly run = (): void => {
    this.scheduled = false;
    if (this.timer) { clearTimeout(this.timer); this.timer = undefined; }
    void this.flush();
  };

  private async flush(): Promise<void> {
    if (this.flushing || this.queue.length === 0) return;
    this.flushing = true;
    this.urgent = false;
    this.lastStart = performance.now();
    const batch = this.queue.splice(0, MAX_BATCH);
    try {
      await this.commitIsolating(batch);
    } finally {
      this.flushing = false;
      if (this.queue.length > 0) this.schedule();
    }
  }

  /**
   * Commits a group; when PostgreSQL refuses it for an entry's content, commits each half on its own
   * (down to the one entry at fault), so one bad entry never holds back the others, of any account.
   * Other failures (PostgreSQL unreachable) fail the whole group: its entries are retried later.
   */
  private async commitIsolating(batch: Pending[]): Promise<void> {
    try {
      const results = await this.commitWithRetry(batch.map((p) => p.entry));
      this.commits++;
      batch.forEach((p, i) => { p.resolve(results[i]!); });
    } catch (e) {
      if (!isEntryError(e)) { for (const p of batch) p.reject(e); return; }
      if (batch.length === 1) { batch[0]!.reject(new PoisonEntryError(e)); return; }
      const mid = batch.length >> 1;
      await this.commitIsolating(batch.slice(0, mid));
      await this.commitIsolating(batch.slice(mid));
    }
  }

  private async commitWithRetry(entries: LedgerEntry[]): Promise<SettleResult[]> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.commit(entries);
      } catch (e) {
        const code = (e as { code?: string }).code;
        if ((code === '40P01' || code === '40001') && attempt < 5) continue; // deadlock / serialization: retry whole batch
        throw e;
      }
    }
  }

  /**
   * One statement per group commit: ledger rows, balances and period spend move together (a single
   * statement is atomic) in one round trip. Only a key clash needs a second statement. The statement
   * checks the entries' account and key ids for the whole group (`unknown`: one join, raising SQLSTATE
   * 23503 as a foreign key would), where a foreign key per row cost a third of a row's insert (migration 017).
   */
  private async commit(entries: LedgerEntry[]): Promise<SettleResult[]> {
    // Within one batch, a repeat of key and nonce is the same settle submitted twice (stored once); a
    // repeat of the key with another nonce is a client reusing a request id (stored under its own key).
    const seen = new Map<string, string>();
    const dup = new Set<number>();
    const keys = entries.map((e, i) => {
      const nonce = seen.get(e.idemKey);
      if (nonce === undefined) { seen.set(e.idemKey, e.nonce); return e.idemKey; }
      if (nonce === e.nonce) dup.add(i);
      return nonce === e.nonce ? e.idemKey : `${e.idemKey}~${e.nonce}`;
    });
    const fresh = entries.map((_, i) => i).filter((i) => !dup.has(i));
    const stored = new Set<string>();
    const balances = new Map<string, { balance: bigint; version: bigint }>();
    const spends = new Map<string, SettleResult['spends']>();
    await this.apply(this.db, fresh.map((i) => ({ ...entries[i]!, idemKey: keys[i]! })), stored, balances, spends);
    // Keys already in the ledger: same nonce = a retried settle (already billed); else a reused request id.
    const clashed = fresh.filter((i) => !stored.has(keys[i]!));
    if (clashed.length > 0) {
      const prior = await this.db.query('SELECT idem_key, nonce FROM ledger WHERE idem_key = ANY($1)', [clashed.map((i) => keys[i]!)]);
      const nonceOf = new Map(prior.rows.map((r) => [r.idem_key as string, r.nonce as string | null]));
      const retry = clashed.filter((i) => nonceOf.get(keys[i]!) !== entries[i]!.nonce);
      for (const i of retry) keys[i] = `${entries[i]!.idemKey}~${entries[i]!.nonce}`;
      if (retry.length > 0) await this.apply(this.db, retry.map((i) => ({ ...entries[i]!, idemKey: keys[i]! })), stored, balances, spends);
    }
    return entries.map((e, i) => {
      const b = balances.get(e.accountId);
      return {
        applied: !dup.has(i) && stored.has(keys[i]!), idemKey: keys[i]!,
        balance: (b?.balance ?? null) as Nanodollars | null, version: b?.version ?? null,
        spends: (e.keyId && spends.get(e.keyId)) || [],
      };
    });
  }

  private async apply(c: Queryable, entries: LedgerEntry[], stored: Set<string>, balances: Map<string, { balance: bigint; version: bigint }>,
    spends: Map<string, SettleResult['spends']>): Promise<void> {
    if (entries.length === 0) return;
    // Named, so each connection parses and plans the statement once. The entries go as one JSON array: one
    // native JSON.stringify instead of ten arrays that pg escapes element by element in JavaScript (4.0 against
    // 6.6-7.4 µs per entry at 3 entries: bench/settle-args.mjs). Amounts are strings: exact.
    const rows = new Array<SettleRow>(entries.length);
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      rows[i] = { idem_key: e.idemKey, nonce: e.nonce, account_id: e.accountId, key_id: e.keyId, kind: e.kind, amount_nd: signed(e).toString(),
        reason: e.reason, model: e.model ?? null, usage: e.usage ?? null, created_at: (e.at ?? new Date()).toISOString() };
    }
    const res = await c.query({ name: 'tollgate_settle', text: SETTLE_SQL, values: [JSON.stringify(rows)] });
    for (const r of res.rows) {
      if (r.t === 'l') { stored.add(r.id as string); this.writes++; }
      else if (r.t === 'a') {
        balances.set(r.id as string, { balance: r.amount as bigint, version: r.version as bigint });
        this.listener.balance(r.id as string, r.amount as Nanodollars, r.version as bigint);
      } else {
        const [period, start] = (r.extra as string).split('|') as ['day' | 'month', string];
        this.listener.spend(r.id as string, period, start, r.amount as Nanodollars, r.version as bigint);
        const list = spends.get(r.id as string) ?? [];
        list.push({ period, start, spent: r.amount as Nanodollars, version: r.version as bigint });
        spends.set(r.id as string, list);
      }
    }
  }
}

const SETTLE_SQL = `
WITH e AS (
  SELECT * FROM json_to_recordset($1::json)
    AS t(idem_key text, nonce text, account_id text, key_id text, kind text, amount_nd bigint, reason text, model text, usage jsonb, created_at timestamptz)
), unknown AS (
  SELECT tollgate_unknown_ref(e.idem_key) FROM e
    LEFT JOIN accounts a ON a.id = e.account_id LEFT JOIN api_keys k ON k.id = e.key_id
   WHERE a.id IS NULL OR (e.key_id IS NOT NULL AND k.id IS NULL)
), ins AS (
  INSERT INTO ledger (idem_key, nonce, account_id, key_id, kind, amount_nd, reason, model, usage, created_at)
  SELECT * FROM e WHERE NOT EXISTS (SELECT FROM unknown) ON CONFLICT (idem_key) DO NOTHING
  RETURNING idem_key, account_id, key_id, kind, amount_nd, created_at
), acc AS (
  UPDATE accounts a SET balance_nd = a.balance_nd + d.delta
    FROM (SELECT account_id, sum(amount_nd)::bigint AS delta FROM ins GROUP BY account_id ORDER BY account_id) d
   WHERE a.id = d.account_id
  RETURNING a.id, a.balance_nd, a.version
), sp AS (
  INSERT INTO key_spend (key_id, period, period_start, spent_nd)
  SELECT key_id, p.period,
         CASE p.period WHEN 'day' THEN (created_at AT TIME ZONE 'UTC')::date
                       ELSE date_trunc('month', created_at AT TIME ZONE 'UTC')::date END,
         sum(-amount_nd)::bigint
    FROM ins CROSS JOIN (VALUES ('day'), ('month')) AS p(period)
   WHERE kind = 'debit' AND key_id IS NOT NULL AND amount_nd < 0
   GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT (key_id, period, period_start) DO UPDATE
    SET spent_nd = key_spend.spent_nd + EXCLUDED.spent_nd, updated_at = clock_timestamp(), version = nextval('change_seq')
  RETURNING key_id, period, to_char(period_start, 'YYYY-MM-DD') AS start, spent_nd, version
)
SELECT 'l' AS t, idem_key AS id, NULL::bigint AS amount, NULL::bigint AS version, NULL::text AS extra FROM ins
UNION ALL SELECT 'a', id, balance_nd, version, NULL FROM acc
UNION ALL SELECT 's', key_id, spent_nd, version, period || '|' || start FROM sp`;

/** One entry as the group commit's JSON carries it (JSON null is SQL NULL; amount_nd a decimal string, read as bigint). */
interface SettleRow {
  idem_key: string; nonce: string; account_id: string; key_id: string | null; kind: string; amount_nd: string;
  reason: string; model: string | null; usage: unknown; created_at: string;
}

function signed(e: LedgerEntry): bigint {
  return e.kind === 'credit' ? e.amount : -e.amount;
}

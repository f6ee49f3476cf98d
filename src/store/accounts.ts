// accounts rows and the period-spend reads that key inspection and admission need.
import type { Queryable } from './db.js';
import { newId } from './ids.js';
import type { Nanodollars } from '../money.js';
import { periodStarts } from './periods.js';

export interface AccountRecord {
  id: string;
  email: string;
  balance: Nanodollars;
  createdAt: Date;
  version: bigint;
}

function toAccount(r: Record<string, unknown>): AccountRecord {
  return { id: r.id as string, email: r.email as string, balance: r.balance_nd as Nanodollars, createdAt: r.created_at as Date, version: r.version as bigint };
}

export async function createAccount(db: Queryable, email: string): Promise<AccountRecord> {
  const res = await db.query('INSERT INTO accounts (id, email) VALUES ($1, $2) RETURNING *', [newId('acct'), email]);
  return toAccount(res.rows[0]!);
}

export async function accountById(db: Queryable, id: string): Promise<AccountRecord | null> {
  const res = await db.query('SELECT * FROM accounts WHERE id = $1', [id]);
  return res.rows[0] ? toAccount(res.rows[0]) : null;
}

export async function accountByEmail(db: Queryable, email: string): Promise<AccountRecord | null> {
  const res = await db.query('SELECT * FROM accounts WHERE email = $1', [email]);
  return res.rows[0] ? toAccount(res.rows[0]) : null;
}

/** An email as people type it: the console keeps emails lower-cased, the CLI as given. */
export async function accountByEmailAnyCase(db: Queryable, email: string): Promise<AccountRecord | null> {
  const res = await db.query('SELECT * FROM accounts WHERE lower(email) = lower($1) ORDER BY created_at LIMIT 1', [email]);
  return res.rows[0] ? toAccount(res.rows[0]) : null;
}

/** Accounts in the order they were made, with their key count; `email` narrows to emails containing it (any case). */
export async function listAccounts(db: Queryable, email: string | null, limit: number): Promise<(AccountRecord & { keys: number })[]> {
  const res = await db.query(
    `SELECT a.*, (SELECT count(*)::int FROM api_keys k WHERE k.account_id = a.id) AS keys FROM accounts a
      WHERE $1::text IS NULL OR strpos(lower(a.email), lower($1)) > 0 ORDER BY a.created_at, a.id LIMIT $2`, [email, limit]);
  return res.rows.map((r) => ({ ...toAccount(r), keys: r.keys as number }));
}

export async function accountsChangedSince(db: Queryable, version: bigint): Promise<AccountRecord[]> {
  const res = await db.query(
    `SELECT * FROM accounts WHERE version > $1 OR updated_at > clock_timestamp() - interval '2 seconds'`, [version]);
  return res.rows.map(toAccount);
}

export interface KeySpend { day: Nanodollars; month: Nanodollars; dayVersion: bigint; monthVersion: bigint }

/** This UTC day's and month's spend for each key given. */
export async function keySpend(db: Queryable, keyIds: string[], now = new Date()): Promise<Map<string, KeySpend>> {
  const { day, month } = periodStarts(now);
  const out = new Map<string, KeySpend>();
  for (const id of keyIds) out.set(id, { day: 0n as Nanodollars, month: 0n as Nanodollars, dayVersion: 0n, monthVersion: 0n });
  if (keyIds.length === 0) return out;
  const res = await db.query(
    `SELECT key_id, period, spent_nd, version FROM key_spend
      WHERE key_id = ANY($1) AND ((period = 'day' AND period_start = $2) OR (period = 'month' AND period_start = $3))`,
    [keyIds, day, month]);
  for (const r of res.rows) {
    const s = out.get(r.key_id as string)!;
    if (r.period === 'day') { s.day = r.spent_nd as Nanodollars; s.dayVersion = r.version as bigint; } else { s.month = r.spent_nd as Nanodollars; s.monthVersion = r.version as bigint; }
  }
  return out;
}

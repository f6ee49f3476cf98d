// Sums over an account's ledger that the operator commands, the console and the beta subscription read.
import type { Queryable } from './db.js';

/** Every ledger entry of an account summed (credits positive, debits negative). */
export async function ledgerTotal(db: Queryable, accountId: string): Promise<bigint> {
  const res = await db.query('SELECT coalesce(sum(amount_nd), 0)::bigint AS total FROM ledger WHERE account_id = $1', [accountId]);
  return res.rows[0]!.total as bigint;
}

/** Credits whose idempotency key names a Checkout session: their sum, or null when there are none. */
export async function clearedCredits(db: Queryable, accountId: string, sessionId: string): Promise<bigint | null> {
  const res = await db.query(
    `SELECT coalesce(sum(amount_nd), 0)::bigint AS total, count(*)::int AS n FROM ledger
      WHERE account_id = $1 AND kind = 'credit' AND strpos(idem_key, $2) > 0`, [accountId, sessionId]);
  const row = res.rows[0]!;
  return (row.n as number) > 0 ? (row.total as bigint) : null;
}

/** Characters an account's debits used since a time. */
export async function charactersSince(db: Queryable, accountId: string, since: Date): Promise<number> {
  const res = await db.query(`SELECT coalesce(sum((usage->>'characters')::bigint), 0) AS n FROM ledger
                   WHERE account_id = $1 AND kind = 'debit' AND created_at >= $2 AND usage ? 'characters'`, [accountId, since]);
  return Number(res.rows[0]!.n as bigint);
}

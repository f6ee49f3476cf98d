// Parked debits: ledger entries PostgreSQL refused for their content, kept with the error for an operator.
import type { Queryable } from './db.js';

export interface ParkedDebit { accountId: string; amount: bigint; entry: string; error: string }

/** Stores one refused debit (its entry as JSON text: nothing a client sent reaches an index). */
export async function parkDebit(db: Queryable, d: ParkedDebit): Promise<void> {
  await db.query('INSERT INTO parked_debits (account_id, amount_nd, entry, error) VALUES ($1, $2, $3, $4)',
    [d.accountId, d.amount.toString(), d.entry, d.error.slice(0, 2000)]);
}


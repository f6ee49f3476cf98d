// A credit to an account's balance through the settler: operator credits, card top-ups and auto top-ups all land here.
import { randomUUID } from 'node:crypto';
import type { Db } from '../store/db.js';
import { accountById } from '../store/accounts.js';
import type { Settler } from './settle.js';
import type { Nanodollars } from '../money.js';

export interface CreditDeps { db: Db; settler: Settler }

/** Credits `amount` once per `idemKey`; returns the balance after it. */
export async function credit(d: CreditDeps, accountId: string, amount: Nanodollars, reason: string, idemKey = `credit:${randomUUID()}`): Promise<bigint> {
  const r = await d.settler.submit({ idemKey, nonce: idemKey, accountId, keyId: null, kind: 'credit', amount, reason });
  return r.balance ?? (await accountById(d.db, accountId))!.balance;
}

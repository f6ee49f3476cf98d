// Operator commands (accounts, credits, keys) as functions on the store, shared by the CLI and the admin socket.
import { randomUUID } from 'node:crypto';
import type { Db } from './store/db.js';
import { accountById, accountByEmail, createAccount, keySpend } from './store/accounts.js';
import { createKey, keysOfAccount, revokeKey, SCOPES, type KeyRecord, type Period, type Scope } from './store/keys.js';
import type { Settler } from './ledger/settle.js';
import { dollarsToNano, nanoToDollars, type Nanodollars } from './money.js';

export class OpError extends Error {}

export interface OpsDeps { db: Db; settler: Settler; onKey?: (k: KeyRecord) => void }

export type OpArgs = Record<string, string | boolean | undefined>;

function str(a: OpArgs, name: string, required = true): string | undefined {
  const v = a[name];
  if (typeof v === 'string' && v.length > 0) return v;
  if (required) throw new OpError(`--${name.replace(/_/g, '-')} is required`);
  return undefined;
}

function dollars(text: string, name: string): Nanodollars {
  try {
    const v = dollarsToNano(text);
    if (v < 0n) throw new RangeError('negative');
    return v;
  } catch { throw new OpError(`--${name} must be a non-negative dollar amount with at most 9 decimals, got "${text}"`); }
}

function posInt(text: string | undefined, name: string): number | null {
  if (text === undefined) return null;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new OpError(`--${name} must be a positive whole number, got "${text}"`);
  return n;
}

export function keyView(k: KeyRecord, spend?: { day: bigint; month: bigint }): Record<string, unknown> {
  return {
    prefix: k.prefix, label: k.label, account_id: k.accountId, scopes: k.scopes,
    spend_limit: k.spendLimit === null ? null : nanoToDollars(k.spendLimit), spend_limit_period: k.spendLimitPeriod,
    rpm_limit: k.rpmLimit, concurrency_limit: k.concurrencyLimit,
    revoked_at: k.revokedAt?.toISOString() ?? null, created_at: k.createdAt.toISOString(),
    ...(spend ? { usage_daily: nanoToDollars(spend.day), usage_monthly: nanoToDollars(spend.month) } : {}),
  };
}

export async function credit(d: OpsDeps, accountId: string, amount: Nanodollars, reason: string, idemKey = `credit:${randomUUID()}`): Promise<bigint> {
  const r = await d.settler.submit({ idemKey, nonce: idemKey, accountId, keyId: null, kind: 'credit', amount, reason });
  return r.balance ?? (await accountById(d.db, accountId))!.balance;
}

export async function runOp(d: OpsDeps, command: string, a: OpArgs): Promise<Record<string, unknown>> {
  switch (command) {
    case 'account create': {
      const email = str(a, 'email')!;
      if (!/^[^\s@]+@[^\s@]+$/.test(email)) throw new OpError(`--email must be an email address, got "${email}"`);
      if (await accountByEmail(d.db, email)) throw new OpError(`an account with email ${email} exists already`);
      const acct = await createAccount(d.db, email);
      const amount = a.credit ? dollars(str(a, 'credit')!, 'credit') : 0n;
      const balance = amount > 0n ? await credit(d, acct.id, amount as Nanodollars, 'operator credit at account creation') : 0n;
      return { account_id: acct.id, email, balance: nanoToDollars(balance) };
    }
    case 'account credit': {
      const id = str(a, 'account_id')!;
      if (!(await accountById(d.db, id))) throw new OpError(`no account ${id}`);
      const amount = dollars(str(a, 'amount')!, 'amount');
      const balance = await credit(d, id, amount, typeof a.reason === 'string' ? a.reason : 'operator credit');
      return { account_id: id, credited: nanoToDollars(amount), balance: nanoToDollars(balance) };
    }
    case 'account show': {
      const id = str(a, 'account_id')!;
      const acct = await accountById(d.db, id);
      if (!acct) throw new OpError(`no account ${id}`);
      const keys = await keysOfAccount(d.db, id);
      const spend = await keySpend(d.db, keys.map((k) => k.id));
      const sum = await d.db.query('SELECT coalesce(sum(amount_nd), 0)::bigint AS total FROM ledger WHERE account_id = $1', [id]);
      return {
        account_id: id, email: acct.email, balance: nanoToDollars(acct.balance),
        ledger_total: nanoToDollars(sum.rows[0]!.total as bigint), keys: keys.map((k) => keyView(k, spend.get(k.id))),
      };
    }
    case 'key create': {
      const accountId = str(a, 'account')!;
      if (!(await accountById(d.db, accountId))) throw new OpError(`no account ${accountId}`);
      const scopes = (str(a, 'scopes', false) ?? SCOPES.join(',')).split(',').map((x) => x.trim()).filter(Boolean);
      for (const sc of scopes) if (!SCOPES.includes(sc as Scope)) throw new OpError(`--scopes: unknown scope "${sc}" (use ${SCOPES.join(', ')})`);
      if (scopes.length === 0) throw new OpError('--scopes needs at least one scope');
      const limitText = str(a, 'spend_limit', false);
      const period = str(a, 'period', false);
      if (period && period !== 'daily' && period !== 'monthly') throw new OpError(`--period must be daily or monthly, got "${period}"`);
      if (period && !limitText) throw new OpError('--period needs --spend-limit');
      const { key, record } = await createKey(d.db, {
        accountId, label: str(a, 'label', false) ?? '', scopes: scopes as Scope[],
        spendLimit: limitText ? dollars(limitText, 'spend-limit') : null, spendLimitPeriod: (period as Period | undefined) ?? 'monthly',
        rpmLimit: posInt(str(a, 'rpm', false), 'rpm'), concurrencyLimit: posInt(str(a, 'concurrency', false), 'concurrency'),
      });
      d.onKey?.(record);
      return { key, ...keyView(record) };
    }
    case 'key revoke': {
      const prefix = str(a, 'prefix')!;
      const rec = await revokeKey(d.db, prefix);
      if (!rec) throw new OpError(`no key with prefix ${prefix}`);
      d.onKey?.(rec);
      return keyView(rec);
    }
    case 'key list': {
      const id = str(a, 'account')!;
      const keys = await keysOfAccount(d.db, id);
      const spend = await keySpend(d.db, keys.map((k) => k.id));
      return { account_id: id, keys: keys.map((k) => keyView(k, spend.get(k.id))) };
    }
    default:
      throw new OpError(`unknown command "${command}"`);
  }
}

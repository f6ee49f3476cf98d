// Operator commands (accounts, credits, keys) as functions on the store, shared by the CLI and the admin socket.
import type { Db, Queryable } from './store/db.js';
import { accountById, accountByEmail, accountByEmailAnyCase, createAccount, keySpend, listAccounts, type AccountRecord } from './store/accounts.js';
import { createKey, keyByHash, keysOfAccount, revokeKey, updateKeyLimits, SCOPES, type KeyLimits, type KeyRecord, type Period, type Scope } from './store/keys.js';
import { hashKey, KEY_DISPLAY_PREFIX_LEN } from './store/ids.js';
import { ledgerTotal } from './store/ledger-reads.js';
import { consoleUserFor, createSigninLink, EmailTaken } from './store/console.js';
import type { Settler } from './ledger/settle.js';
import { credit } from './ledger/credit.js';
import { dollarsToNano, nanoToDollars, type Nanodollars } from './money.js';

/** A command that cannot be done: exit 2 for a wrong invocation (a flag missing or malformed), 1 when what it names is not there. */
export class OpError extends Error {
  constructor(message: string, readonly exitCode: 1 | 2 = 2) {
    super(message);
  }
}

function missing(message: string): OpError {
  return new OpError(message, 1);
}

export interface OpsDeps {
  db: Db;
  settler: Settler;
  onKey?: (k: KeyRecord) => void;
  /** Where the console is reached (sign-in links): the running server's own base URL, else the config's. */
  baseUrl: string;
}

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

/** The per-key rate and usage limits given as flags: a whole number, or `none` (when clearing is allowed) for no limit. */
const LIMIT_FLAGS = [['rpm', 'rpmLimit'], ['concurrency', 'concurrencyLimit'], ['tpm', 'tpmLimit'], ['chars_per_min', 'charsPerMinLimit'],
  ['audio_secs_per_min', 'audioSecsPerMinLimit']] as const;

function limitFlags(a: OpArgs, clearing: boolean): KeyLimits {
  const out: KeyLimits = {};
  // Model fallback: the key opts in (true) or out (false) of its models' configured fallbacks.
  const fb = str(a, 'fallback', false);
  if (fb !== undefined) {
    if (fb !== 'true' && fb !== 'false') throw new OpError(`--fallback must be true or false, got "${fb}"`);
    out.fallback = fb === 'true';
  }
  for (const [flag, field] of LIMIT_FLAGS) {
    const text = str(a, flag, false);
    if (text === undefined) continue;
    out[field] = clearing && text === 'none' ? null : posInt(text, flag.replace(/_/g, '-'));
  }
  return out;
}

export function keyView(k: KeyRecord, spend?: { day: bigint; month: bigint }): Record<string, unknown> {
  return {
    prefix: k.prefix, label: k.label, account_id: k.accountId, scopes: k.scopes,
    spend_limit: k.spendLimit === null ? null : nanoToDollars(k.spendLimit), spend_limit_period: k.spendLimitPeriod,
    rpm_limit: k.rpmLimit, concurrency_limit: k.concurrencyLimit,
    tpm_limit: k.tpmLimit, chars_per_min_limit: k.charsPerMinLimit, audio_secs_per_min_limit: k.audioSecsPerMinLimit, fallback: k.fallback,
    revoked_at: k.revokedAt?.toISOString() ?? null, created_at: k.createdAt.toISOString(),
    ...(spend ? { usage_daily: nanoToDollars(spend.day), usage_monthly: nanoToDollars(spend.month) } : {}),
  };
}

/** A key as an error message may quote it: its prefix only. */
function shownKey(k: string): string {
  return `${k.slice(0, KEY_DISPLAY_PREFIX_LEN)}…`;
}

/** Kept here for callers that still import it from ops: the ledger owns it. */
export { credit } from './ledger/credit.js';

/** An account by id (`acct_…`) or email; a clear exit-1 error when there is none. */
export async function findAccount(db: Queryable, ref: string): Promise<AccountRecord> {
  const acct = ref.includes('@') ? await accountByEmail(db, ref) ?? await accountByEmailAnyCase(db, ref) : await accountById(db, ref);
  if (acct) return acct;
  throw missing(`no account ${ref}: give an account id (acct_…) or its email; \`account list\` shows every account`);
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
      const amount = dollars(str(a, 'amount')!, 'amount');
      const { id } = await findAccount(d.db, str(a, 'account_id')!);
      const balance = await credit(d, id, amount, typeof a.reason === 'string' ? a.reason : 'operator credit');
      return { account_id: id, credited: nanoToDollars(amount), balance: nanoToDollars(balance) };
    }
    case 'account list': {
      const limit = posInt(str(a, 'limit', false), 'limit') ?? 100;
      const rows = await listAccounts(d.db, str(a, 'email', false) ?? null, limit + 1);
      return {
        accounts: rows.slice(0, limit).map((r) => ({ account_id: r.id, email: r.email, balance: nanoToDollars(r.balance), keys: r.keys, created_at: r.createdAt.toISOString() })),
        more: rows.length > limit,
      };
    }
    case 'account sign-in-link': {
      const acct = await findAccount(d.db, str(a, 'account_id')!);
      let user;
      try { user = await consoleUserFor(d.db, acct); } catch (e) {
        if (e instanceof EmailTaken) throw new OpError(`the console email ${acct.email} belongs to another account's user`, 1);
        throw e;
      }
      const link = await createSigninLink(d.db, user.id);
      return { account_id: acct.id, email: user.email, url: `${d.baseUrl}/console/signin/${link.token}`, expires_at: link.expiresAt.toISOString() };
    }
    case 'account show': {
      // One snapshot: a debit committed between the reads would otherwise show in one figure and not the other.
      return d.db.tx(async (c) => {
        await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
        const acct = await findAccount(c, str(a, 'account_id')!);
        const id = acct.id;
        const keys = await keysOfAccount(c, id);
        const spend = await keySpend(c, keys.map((k) => k.id));
        const total = await ledgerTotal(c, id);
        return {
          account_id: id, email: acct.email, balance: nanoToDollars(acct.balance),
          ledger_total: nanoToDollars(total), keys: keys.map((k) => keyView(k, spend.get(k.id))),
        };
      });
    }
    case 'key create': {
      const accountRef = str(a, 'account')!;
      const scopes = (str(a, 'scopes', false) ?? SCOPES.join(',')).split(',').map((x) => x.trim()).filter(Boolean);
      for (const sc of scopes) if (!SCOPES.includes(sc as Scope)) throw new OpError(`--scopes: unknown scope "${sc}" (use ${SCOPES.join(', ')})`);
      if (scopes.length === 0) throw new OpError('--scopes needs at least one scope');
      const limitText = str(a, 'spend_limit', false);
      const period = str(a, 'period', false);
      if (period && period !== 'daily' && period !== 'monthly') throw new OpError(`--period must be daily or monthly, got "${period}"`);
      if (period && !limitText) throw new OpError('--period needs --spend-limit');
      const accountId = (await findAccount(d.db, accountRef)).id;
      const { key, record } = await createKey(d.db, {
        accountId, label: str(a, 'label', false) ?? '', scopes: scopes as Scope[],
        spendLimit: limitText ? dollars(limitText, 'spend-limit') : null, spendLimitPeriod: (period as Period | undefined) ?? 'monthly',
        ...limitFlags(a, false),
      });
      d.onKey?.(record);
      return { key, ...keyView(record) };
    }
    case 'key revoke': {
      // The whole key (as a client holds it) or its 12-character prefix (as listings show it).
      const given = str(a, 'prefix')!;
      const whole = given.length > KEY_DISPLAY_PREFIX_LEN ? await keyByHash(d.db, hashKey(given)) : null;
      if (given.length > KEY_DISPLAY_PREFIX_LEN && !whole) throw missing(`no key ${shownKey(given)}: give the whole key or its prefix (the first ${KEY_DISPLAY_PREFIX_LEN} characters)`);
      const prefix = whole?.prefix ?? given;
      const rec = await revokeKey(d.db, prefix);
      if (!rec) throw missing(`no key with prefix ${prefix}: \`key list --account ACCOUNT\` shows an account's keys`);
      d.onKey?.(rec);
      return keyView(rec);
    }
    case 'key limits': {
      // Sets the rate and usage limits of a key by its prefix; `none` removes one (the server's default applies to rpm and concurrency); --fallback true|false its opt-in.
      const prefix = str(a, 'prefix')!.slice(0, KEY_DISPLAY_PREFIX_LEN);
      const limits = limitFlags(a, true);
      if (Object.keys(limits).length === 0) throw new OpError('give at least one of --rpm, --concurrency, --tpm, --chars-per-min, --audio-secs-per-min (a whole number, or none), --fallback (true or false)');
      const rec = await updateKeyLimits(d.db, prefix, limits);
      if (!rec) throw missing(`no key with prefix ${prefix}: \`key list --account ACCOUNT\` shows an account's keys`);
      d.onKey?.(rec);
      return keyView(rec);
    }
    case 'key list': {
      const id = (await findAccount(d.db, str(a, 'account')!)).id;
      const keys = await keysOfAccount(d.db, id);
      const spend = await keySpend(d.db, keys.map((k) => k.id));
      return { account_id: id, keys: keys.map((k) => keyView(k, spend.get(k.id))) };
    }
    default:
      throw new OpError(`unknown command "${command}"`);
  }
}

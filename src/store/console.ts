// The console's SQL: users and sessions, rate-limit counters and secrets, and the ledger reads behind the billing and usage pages.
import { createHash, randomBytes } from 'node:crypto';
import type { Db, Queryable } from './db.js';
import { createAccount } from './accounts.js';
import { base62 } from './ids.js';
import { usageRows } from './receipts.js';

export interface ConsoleUser { id: string; email: string; accountId: string; passwordHash: string }
export interface Session { tokenHash: string; csrf: string; user: ConsoleUser }

export const SESSION_TTL_MS = 14 * 24 * 3600_000;

function toUser(r: Record<string, unknown>): ConsoleUser {
  return { id: r.id as string, email: r.email as string, accountId: r.account_id as string, passwordHash: r.password_hash as string };
}

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export function newToken(): string {
  return randomBytes(32).toString('base64url');
}

export class EmailTaken extends Error {}

/** A Tollgate account and its console user, in one transaction; the email must be new to both. */
export async function createUser(db: Db, email: string, passwordHash: string): Promise<ConsoleUser> {
  try {
    return await db.tx(async (c) => {
      const acct = await createAccount(c, email);
      const res = await c.query(
        'INSERT INTO console_users (id, email, password_hash, account_id) VALUES ($1, $2, $3, $4) RETURNING *',
        [`usr_${base62(16)}`, email, passwordHash, acct.id]);
      return toUser(res.rows[0]!);
    });
  } catch (e) {
    if ((e as { code?: string }).code === '23505') throw new EmailTaken(email);
    throw e;
  }
}

/** The password hash of a console user who has none yet (made for an account by the operator): no password matches it. */
export const NO_PASSWORD = '!';

export function hasPassword(u: ConsoleUser): boolean {
  return u.passwordHash !== NO_PASSWORD;
}

/** The console user of an existing account, made (without a password) if it has none. */
export async function consoleUserFor(db: Queryable, account: { id: string; email: string }): Promise<ConsoleUser> {
  await db.query(
    `INSERT INTO console_users (id, email, password_hash, account_id) VALUES ($1, lower($2), $3, $4) ON CONFLICT DO NOTHING`,
    [`usr_${base62(16)}`, account.email, NO_PASSWORD, account.id]);
  const res = await db.query('SELECT * FROM console_users WHERE account_id = $1', [account.id]);
  if (!res.rows[0]) throw new EmailTaken(account.email); // the email belongs to another account's console user
  return toUser(res.rows[0]);
}

export const SIGNIN_LINK_TTL_MS = 24 * 3600_000;

/** A one-time sign-in token for a user (only its hash is stored). */
export async function createSigninLink(db: Queryable, userId: string, ttlMs = SIGNIN_LINK_TTL_MS): Promise<{ token: string; expiresAt: Date }> {
  const token = newToken();
  const expiresAt = new Date(Date.now() + ttlMs);
  await db.query('INSERT INTO console_signin_links (token_hash, user_id, expires_at) VALUES ($1, $2, $3)', [hashToken(token), userId, expiresAt]);
  return { token, expiresAt };
}

/** The user a sign-in link is for, while it is unused and unexpired; `use` spends it (one statement: used once). */
export async function signinLinkUser(db: Queryable, token: string, use: boolean): Promise<ConsoleUser | null> {
  const res = use
    ? await db.query(
      `UPDATE console_signin_links l SET used_at = now() FROM console_users u
        WHERE l.token_hash = $1 AND l.used_at IS NULL AND l.expires_at > now() AND u.id = l.user_id RETURNING u.*`, [hashToken(token)])
    : await db.query(
      `SELECT u.* FROM console_signin_links l JOIN console_users u ON u.id = l.user_id
        WHERE l.token_hash = $1 AND l.used_at IS NULL AND l.expires_at > now()`, [hashToken(token)]);
  return res.rows[0] ? toUser(res.rows[0]) : null;
}

export async function userByEmail(db: Queryable, email: string): Promise<ConsoleUser | null> {
  const res = await db.query('SELECT * FROM console_users WHERE email = $1', [email]);
  return res.rows[0] ? toUser(res.rows[0]) : null;
}

export async function createSession(db: Queryable, userId: string): Promise<{ token: string; csrf: string }> {
  const token = newToken();
  const csrf = newToken();
  await db.query('INSERT INTO console_sessions (token_hash, user_id, csrf_token, expires_at) VALUES ($1, $2, $3, $4)',
    [hashToken(token), userId, csrf, new Date(Date.now() + SESSION_TTL_MS)]);
  // Expired sessions of anyone are swept now and then rather than by a timer.
  if (Math.random() < 0.05) await db.query('DELETE FROM console_sessions WHERE expires_at < now()');
  return { token, csrf };
}

export async function sessionByToken(db: Queryable, token: string): Promise<Session | null> {
  const res = await db.query(
    `SELECT s.token_hash, s.csrf_token, u.* FROM console_sessions s JOIN console_users u ON u.id = s.user_id
      WHERE s.token_hash = $1 AND s.expires_at > now()`, [hashToken(token)]);
  const r = res.rows[0];
  return r ? { tokenHash: r.token_hash as string, csrf: r.csrf_token as string, user: toUser(r) } : null;
}

export async function deleteSession(db: Queryable, tokenHash: string): Promise<void> {
  await db.query('DELETE FROM console_sessions WHERE token_hash = $1', [tokenHash]);
}

/** Log out everywhere: every session of the user ends. */
export async function deleteSessionsOf(db: Queryable, userId: string): Promise<void> {
  await db.query('DELETE FROM console_sessions WHERE user_id = $1', [userId]);
}

export async function activeSessions(db: Queryable, userId: string): Promise<number> {
  const res = await db.query('SELECT count(*)::int AS n FROM console_sessions WHERE user_id = $1 AND expires_at > now()', [userId]);
  return res.rows[0]!.n as number;
}

/** A new password ends every session of the user, in the same transaction, and opens a new one for the browser that changed it. */
export async function changePassword(db: Db, userId: string, passwordHash: string): Promise<{ token: string; csrf: string }> {
  return db.tx(async (c) => {
    await c.query('UPDATE console_users SET password_hash = $2 WHERE id = $1', [userId, passwordHash]);
    await deleteSessionsOf(c, userId);
    return createSession(c, userId);
  });
}

/**
 * Counts one attempt in `bucket`'s fixed window, starting a new window once the old one is over: one
 * statement, so of any number of concurrent attempts each sees its own count. → the count and window start.
 */
export async function hitBucket(db: Queryable, bucket: string, windowMs: number): Promise<{ hits: number; windowStart: Date }> {
  const res = await db.query(
    `INSERT INTO console_throttle AS t (bucket, window_start, hits) VALUES ($1, now(), 1)
     ON CONFLICT (bucket) DO UPDATE SET
       hits = CASE WHEN t.window_start <= now() - $2::int * interval '1 millisecond' THEN 1 ELSE t.hits + 1 END,
       window_start = CASE WHEN t.window_start <= now() - $2::int * interval '1 millisecond' THEN now() ELSE t.window_start END
     RETURNING hits, window_start`, [bucket, windowMs]);
  // Old windows of anyone are swept now and then rather than by a timer.
  if (Math.random() < 0.02) await db.query(`DELETE FROM console_throttle WHERE window_start < now() - interval '1 day'`);
  return { hits: res.rows[0]!.hits as number, windowStart: res.rows[0]!.window_start as Date };
}

/** Gives back one counted attempt (a log-in that succeeded was no failure). */
export async function refundBucket(db: Queryable, bucket: string): Promise<void> {
  await db.query('UPDATE console_throttle SET hits = hits - 1 WHERE bucket = $1 AND hits > 0', [bucket]);
}

/** A secret shared by every instance on this store: made by the first to ask, read by the others. */
export async function sharedSecret(db: Queryable, name: string): Promise<string> {
  await db.query('INSERT INTO console_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING', [name, randomBytes(32).toString('base64url')]);
  const res = await db.query('SELECT value FROM console_secrets WHERE name = $1', [name]);
  return res.rows[0]!.value as string;
}

export interface LedgerRow {
  id: bigint;
  at: Date;
  kind: 'credit' | 'debit';
  amount: bigint;
  reason: string;
  model: string | null;
  keyPrefix: string | null;
  inputTokens: number | null;
  outputTokens: number | null;
  /** The other units the debit was priced by (the ledger's `usage`), null where it has none. */
  characters: number | null;
  audioSecondsIn: number | null;
  audioSecondsOut: number | null;
  audioInputTokens: number | null;
  audioOutputTokens: number | null;
  cachedInputTokens: number | null;
  /** A debit's request (its `x-request-id`); null for credits. */
  requestId: string | null;
}

const LEDGER_COLS = `l.id, l.created_at, l.kind, l.amount_nd, l.reason, l.model, k.prefix, l.idem_key,
  (l.usage->>'input_tokens')::bigint AS input_tokens, (l.usage->>'output_tokens')::bigint AS output_tokens,
  (l.usage->>'characters')::bigint AS characters, (l.usage->>'audio_seconds_in')::float8 AS audio_seconds_in,
  (l.usage->>'audio_seconds_out')::float8 AS audio_seconds_out, (l.usage->>'audio_input_tokens')::bigint AS audio_input_tokens,
  (l.usage->>'audio_output_tokens')::bigint AS audio_output_tokens, (l.usage->>'cached_input_tokens')::bigint AS cached_input_tokens`;

function toLedger(r: Record<string, unknown>): LedgerRow {
  const n = (v: unknown) => (v === null || v === undefined ? null : Number(v as bigint));
  return {
    id: r.id as bigint, at: r.created_at as Date, kind: r.kind as 'credit' | 'debit', amount: r.amount_nd as bigint,
    reason: r.reason as string, model: (r.model as string | null) ?? null, keyPrefix: (r.prefix as string | null) ?? null,
    inputTokens: n(r.input_tokens), outputTokens: n(r.output_tokens), characters: n(r.characters),
    audioSecondsIn: n(r.audio_seconds_in), audioSecondsOut: n(r.audio_seconds_out),
    audioInputTokens: n(r.audio_input_tokens), audioOutputTokens: n(r.audio_output_tokens), cachedInputTokens: n(r.cached_input_tokens),
    // A debit's idempotency key is its request id; a request settled in parts adds `#n` to it.
    requestId: r.kind === 'debit' ? (r.idem_key as string).split('#')[0]! : null,
  };
}

/** The newest entries first; `kind` narrows to credits or debits. */
export async function latestEntries(db: Queryable, accountId: string, limit: number, kind?: 'credit' | 'debit'): Promise<LedgerRow[]> {
  const res = await db.query(
    `SELECT ${LEDGER_COLS} FROM ledger l LEFT JOIN api_keys k ON k.id = l.key_id
      WHERE l.account_id = $1 AND ($2::text IS NULL OR l.kind = $2) ORDER BY l.created_at DESC, l.id DESC LIMIT $3`,
    [accountId, kind ?? null, limit]);
  return res.rows.map(toLedger);
}

/** Every entry in id order, a page at a time (the CSV export streams these). */
export async function entriesAfter(db: Queryable, accountId: string, afterId: bigint, limit: number): Promise<LedgerRow[]> {
  const res = await db.query(
    `SELECT ${LEDGER_COLS} FROM ledger l LEFT JOIN api_keys k ON k.id = l.key_id
      WHERE l.account_id = $1 AND l.id > $2 ORDER BY l.id LIMIT $3`, [accountId, afterId, limit]);
  return res.rows.map(toLedger);
}

export interface DailySpend { day: string; keyPrefix: string | null; product: string; spent: bigint; requests: number }

/**
 * Debits per UTC day, key and product (the entry's reason) since a day: the same query as `GET /svc/v1/usage`
 * (store/receipts.ts), so the charts and the export show the same numbers.
 */
export async function dailySpend(db: Queryable, accountId: string, since: Date): Promise<DailySpend[]> {
  const rows = await usageRows(db, accountId, ['day', 'key', 'route'], since, new Date(Date.now() + 86_400_000));
  return rows.map((r) => ({ day: r.day!, keyPrefix: r.key ?? null, product: r.route!, spent: r.cost, requests: r.requests }));
}

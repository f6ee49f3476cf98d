// api_keys rows: create, revoke, list, look up by hash, and the change feed the key cache follows.
import type { Queryable } from './db.js';
import { newApiKey, newId } from './ids.js';
import type { Nanodollars } from '../money.js';

export type Scope = 'llm' | 'voice' | 'batch';
export const SCOPES: readonly Scope[] = ['llm', 'voice', 'batch'];
export type Period = 'daily' | 'monthly';

export interface KeyRecord {
  id: string;
  accountId: string;
  prefix: string;
  hash: string;
  label: string;
  scopes: Scope[];
  spendLimit: Nanodollars | null;
  spendLimitPeriod: Period | null;
  rpmLimit: number | null;
  concurrencyLimit: number | null;
  /** Tokens per minute (text: prompt and output), characters per minute (speech synthesis), audio seconds per minute (transcription, speech to speech); null: none. */
  tpmLimit: number | null;
  charsPerMinLimit: number | null;
  audioSecsPerMinLimit: number | null;
  /** Opted in to model fallback: a request naming no `models` may be served by its model's configured fallbacks. */
  fallback: boolean;
  revokedAt: Date | null;
  createdAt: Date;
  version: bigint;
}

export interface NewKey {
  accountId: string;
  label?: string;
  scopes?: Scope[];
  spendLimit?: Nanodollars | null;
  spendLimitPeriod?: Period | null;
  rpmLimit?: number | null;
  concurrencyLimit?: number | null;
  tpmLimit?: number | null;
  charsPerMinLimit?: number | null;
  audioSecsPerMinLimit?: number | null;
  fallback?: boolean;
}

const COLS = `id, account_id, prefix, key_hash, label, scopes, spend_limit_nd, spend_limit_period, rpm_limit,
  concurrency_limit, tpm_limit, chars_per_min_limit, audio_secs_per_min_limit, fallback, revoked_at, created_at, version`;

export function toKey(r: Record<string, unknown>): KeyRecord {
  return {
    id: r.id as string, accountId: r.account_id as string, prefix: r.prefix as string, hash: r.key_hash as string,
    label: r.label as string, scopes: r.scopes as Scope[],
    spendLimit: (r.spend_limit_nd as Nanodollars | null) ?? null,
    spendLimitPeriod: (r.spend_limit_period as Period | null) ?? null,
    rpmLimit: (r.rpm_limit as number | null) ?? null, concurrencyLimit: (r.concurrency_limit as number | null) ?? null,
    tpmLimit: (r.tpm_limit as number | null) ?? null, charsPerMinLimit: (r.chars_per_min_limit as number | null) ?? null,
    audioSecsPerMinLimit: (r.audio_secs_per_min_limit as number | null) ?? null, fallback: r.fallback === true,
    revokedAt: (r.revoked_at as Date | null) ?? null, createdAt: r.created_at as Date, version: r.version as bigint,
  };
}

/** Inserts a key; the 12-character display prefix is short, so a clash is retried with new material. */
export async function createKey(db: Queryable, k: NewKey): Promise<{ key: string; record: KeyRecord }> {
  for (let attempt = 0; ; attempt++) {
    const material = newApiKey();
    try {
      const res = await db.query(
        `INSERT INTO api_keys (id, account_id, prefix, key_hash, label, scopes, spend_limit_nd, spend_limit_period, rpm_limit, concurrency_limit,
           tpm_limit, chars_per_min_limit, audio_secs_per_min_limit, fallback)
         VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14) RETURNING ${COLS}`,
        [newId('key'), k.accountId, material.prefix, material.hash, k.label ?? '', k.scopes ?? ['llm', 'voice', 'batch'],
          k.spendLimit ?? null, k.spendLimit == null ? null : k.spendLimitPeriod ?? 'monthly', k.rpmLimit ?? null, k.concurrencyLimit ?? null,
          k.tpmLimit ?? null, k.charsPerMinLimit ?? null, k.audioSecsPerMinLimit ?? null, k.fallback ?? false],
      );
      return { key: material.key, record: toKey(res.rows[0]!) };
    } catch (e) {
      const pgErr = e as { code?: string; constraint?: string };
      if (pgErr.code === '23505' && pgErr.constraint === 'api_keys_prefix_key' && attempt < 20) continue;
      throw e;
    }
  }
}

export async function keyByHash(db: Queryable, hash: string): Promise<KeyRecord | null> {
  const res = await db.query(`SELECT ${COLS} FROM api_keys WHERE key_hash = $1`, [hash]);
  return res.rows[0] ? toKey(res.rows[0]) : null;
}

export async function keyByPrefix(db: Queryable, prefix: string): Promise<KeyRecord | null> {
  const res = await db.query(`SELECT ${COLS} FROM api_keys WHERE prefix = $1`, [prefix]);
  return res.rows[0] ? toKey(res.rows[0]) : null;
}

export async function keysOfAccount(db: Queryable, accountId: string): Promise<KeyRecord[]> {
  const res = await db.query(`SELECT ${COLS} FROM api_keys WHERE account_id = $1 ORDER BY created_at, id`, [accountId]);
  return res.rows.map(toKey);
}

export async function revokeKey(db: Queryable, prefix: string): Promise<KeyRecord | null> {
  const res = await db.query(
    `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE prefix = $1 RETURNING ${COLS}`, [prefix]);
  return res.rows[0] ? toKey(res.rows[0]) : null;
}

export interface KeyLimits {
  label?: string;
  spendLimit?: Nanodollars | null;
  spendLimitPeriod?: Period | null;
  rpmLimit?: number | null;
  concurrencyLimit?: number | null;
  tpmLimit?: number | null;
  charsPerMinLimit?: number | null;
  audioSecsPerMinLimit?: number | null;
  fallback?: boolean;
}

export async function updateKeyLimits(db: Queryable, prefix: string, l: KeyLimits): Promise<KeyRecord | null> {
  const sets: string[] = [];
  const params: unknown[] = [prefix];
  const set = (col: string, v: unknown) => { params.push(v); sets.push(`${col} = $${params.length}`); };
  if (l.label !== undefined) set('label', l.label);
  if (l.spendLimit !== undefined) {
    set('spend_limit_nd', l.spendLimit);
    set('spend_limit_period', l.spendLimit === null ? null : l.spendLimitPeriod ?? 'monthly');
  }
  if (l.rpmLimit !== undefined) set('rpm_limit', l.rpmLimit);
  if (l.concurrencyLimit !== undefined) set('concurrency_limit', l.concurrencyLimit);
  if (l.tpmLimit !== undefined) set('tpm_limit', l.tpmLimit);
  if (l.charsPerMinLimit !== undefined) set('chars_per_min_limit', l.charsPerMinLimit);
  if (l.audioSecsPerMinLimit !== undefined) set('audio_secs_per_min_limit', l.audioSecsPerMinLimit);
  if (l.fallback !== undefined) set('fallback', l.fallback);
  if (sets.length === 0) return keyByPrefix(db, prefix);
  const res = await db.query(`UPDATE api_keys SET ${sets.join(', ')} WHERE prefix = $1 RETURNING ${COLS}`, params);
  return res.rows[0] ? toKey(res.rows[0]) : null;
}

/**
 * Keys changed since a version. Sequence values are taken before commit, so a slow writer can
 * commit a lower version after a higher one is seen: the two-second overlap re-reads those.
 */
/** Every key (the gateway keeps them all in memory, so unknown keys are answered without the store). */
export async function allKeys(db: Queryable): Promise<KeyRecord[]> {
  const res = await db.query('SELECT * FROM api_keys');
  return res.rows.map(toKey);
}

export async function keysChangedSince(db: Queryable, version: bigint): Promise<KeyRecord[]> {
  const res = await db.query(
    `SELECT ${COLS} FROM api_keys WHERE version > $1 OR updated_at > clock_timestamp() - interval '2 seconds'`, [version]);
  return res.rows.map(toKey);
}

// realtime_secrets rows: mint, the live ones and the change feed the secret mirror follows, a grant's session configuration.
import type { Queryable } from './db.js';

/** What every instance keeps of a live secret: enough to answer an upgrade without a query. */
export interface SecretRecord { hash: string; keyId: string; expiresAt: number; version: bigint }

function toSecret(r: Record<string, unknown>): SecretRecord {
  return { hash: r.secret_hash as string, keyId: r.key_id as string, expiresAt: (r.expires_at as Date).getTime(), version: r.version as bigint };
}

const COLS = 'secret_hash, key_id, expires_at, version';

export async function insertSecret(db: Queryable, s: { hash: string; keyId: string; session: string; expiresAt: Date }): Promise<SecretRecord> {
  const r = await db.query(`INSERT INTO realtime_secrets (secret_hash, key_id, session, expires_at) VALUES ($1, $2, $3, $4) RETURNING ${COLS}`,
    [s.hash, s.keyId, s.session, s.expiresAt]);
  return toSecret(r.rows[0]!);
}

/** The secrets not yet expired, or expired within the last hour (loaded at start: an expired one is refused as such). */
export async function liveSecrets(db: Queryable): Promise<SecretRecord[]> {
  const r = await db.query(`SELECT ${COLS} FROM realtime_secrets WHERE expires_at > now() - interval '1 hour'`);
  return r.rows.map(toSecret);
}

/**
 * Secrets minted since `version`, and those of the last two seconds (a transaction that took its
 * number earlier but committed later than a poll is still seen), as the key feed reads keys.
 */
export async function secretsChangedSince(db: Queryable, version: bigint): Promise<SecretRecord[]> {
  const r = await db.query(`SELECT ${COLS} FROM realtime_secrets
    WHERE version > $1 OR created_at > clock_timestamp() - interval '2 seconds'`, [version]);
  return r.rows.map(toSecret);
}

/** The session configuration a secret was minted with (read once, when a known live secret opens a session). */
export async function secretSession(db: Queryable, hash: string): Promise<string | null> {
  const r = await db.query<{ session: string }>('SELECT session FROM realtime_secrets WHERE secret_hash = $1', [hash]);
  return r.rows[0]?.session ?? null;
}

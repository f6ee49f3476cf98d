// Cloned voices and their samples: every read is scoped to the owning account, so no tenant sees another's.
import type { Queryable } from './db.js';
import { base62 } from './ids.js';

export interface SampleRecord {
  id: string;
  fileName: string;
  mimeType: string;
  sizeBytes: number;
  hash: string;
  durationSecs: number | null;
}

/** The voice as one upstream cloned it: the id that upstream gave it. */
export interface VoiceCopy { upstream: string; upstreamVoiceId: string }

export interface VoiceRecord {
  id: string;
  accountId: string;
  name: string;
  description: string | null;
  labels: Record<string, string>;
  modelId: string;
  /** The voice on every upstream of its model's pool, in the pool's order (one for a voice cloned on one upstream). */
  copies: VoiceCopy[];
  createdAt: Date;
  samples: SampleRecord[];
}

/** A sample already stored as a file (status 'uploading' until its voice is inserted, `storeFile`). */
export interface NewSample { fileId: string; fileName: string; mimeType: string; sizeBytes: number; hash: string; durationSecs: number | null }

/** A voice to store: a VoiceRecord before it has an id, a creation time and stored samples. */
export type NewVoice = Omit<VoiceRecord, 'id' | 'createdAt' | 'samples'> & { samples: NewSample[] };

type TxDb = Queryable & { tx<T>(fn: (c: Queryable) => Promise<T>): Promise<T> };

/** Advisory lock class for one account's voice count (the second key is the account id's hash). */
const VOICE_LOCK = 727275;

/** An id in the family's form (20 base62 characters, as ElevenLabs voice ids are). */
export function newVoiceId(): string {
  return base62(20);
}

/**
 * Inserts the voice if the account holds fewer than `maxPerAccount` voices, in one step: the account's
 * voice lock is taken first (a transaction-scoped advisory lock, so concurrent adds of one account
 * queue here and each counts the others' voices; the ledger's row locks are not touched). Its samples'
 * files become the voice's, and each upstream's copy is kept (the voice row names the first). Null when the account is at its limit (nothing is inserted).
 */
export async function insertVoice(db: TxDb, v: NewVoice, maxPerAccount: number, id = newVoiceId()): Promise<string | null> {
  return db.tx(async (c) => {
    await c.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [VOICE_LOCK, v.accountId]);
    const ins = await c.query(
      `INSERT INTO voices (id, account_id, name, description, labels, model_id, upstream, upstream_voice_id)
       SELECT $1, $2, $3, $4, $5::jsonb, $6, $7, $8
        WHERE (SELECT count(*) FROM voices WHERE account_id = $2 AND deleted_at IS NULL) < $9`,
      [id, v.accountId, v.name, v.description, JSON.stringify(v.labels), v.modelId, v.copies[0]!.upstream, v.copies[0]!.upstreamVoiceId, maxPerAccount]);
    if (!ins.rowCount) return null;
    for (const [i, copy] of v.copies.entries()) {
      await c.query('INSERT INTO voice_upstreams (voice_id, seq, upstream, upstream_voice_id) VALUES ($1, $2, $3, $4)', [id, i, copy.upstream, copy.upstreamVoiceId]);
    }
    let seq = 0;
    for (const s of v.samples) {
      await c.query(
        `INSERT INTO voice_samples (id, voice_id, seq, file_name, mime_type, size_bytes, hash, duration_secs, file_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
        [base62(20), id, seq++, s.fileName, s.mimeType, s.sizeBytes, s.hash, s.durationSecs, s.fileId]);
    }
    const kept = await c.query("UPDATE files SET status = 'voice_sample' WHERE id = ANY($1) AND account_id = $2 AND status = 'uploading'", [v.samples.map((s) => s.fileId), v.accountId]);
    if (kept.rowCount !== v.samples.length) throw new Error(`voice ${id}: ${v.samples.length - (kept.rowCount ?? 0)} sample files are gone`);
    return id;
  });
}

const VOICE_COLS = 'id, account_id, name, description, labels, model_id, created_at';
const SAMPLE_COLS = 'id, voice_id, file_name, mime_type, size_bytes, hash, duration_secs';

function toSample(r: Record<string, unknown>): SampleRecord {
  return { id: r.id as string, fileName: r.file_name as string, mimeType: r.mime_type as string, sizeBytes: Number(r.size_bytes),
    hash: r.hash as string, durationSecs: r.duration_secs === null ? null : Number(r.duration_secs) };
}

function toVoice(r: Record<string, unknown>, samples: SampleRecord[], copies: VoiceCopy[]): VoiceRecord {
  return { id: r.id as string, accountId: r.account_id as string, name: r.name as string, description: (r.description as string | null) ?? null,
    labels: (r.labels as Record<string, string>) ?? {}, modelId: r.model_id as string, copies, createdAt: r.created_at as Date, samples };
}

async function withSamples(db: Queryable, rows: Record<string, unknown>[]): Promise<VoiceRecord[]> {
  if (rows.length === 0) return [];
  const ids = rows.map((r) => r.id as string);
  const res = await db.query(`SELECT ${SAMPLE_COLS} FROM voice_samples WHERE voice_id = ANY($1) ORDER BY voice_id, seq`, [ids]);
  const by = new Map<string, SampleRecord[]>();
  for (const r of res.rows) {
    const list = by.get(r.voice_id as string) ?? [];
    list.push(toSample(r));
    by.set(r.voice_id as string, list);
  }
  const copies = new Map<string, VoiceCopy[]>();
  const cs = await db.query('SELECT voice_id, upstream, upstream_voice_id FROM voice_upstreams WHERE voice_id = ANY($1) ORDER BY voice_id, seq', [ids]);
  for (const r of cs.rows) {
    const list = copies.get(r.voice_id as string) ?? [];
    list.push({ upstream: r.upstream as string, upstreamVoiceId: r.upstream_voice_id as string });
    copies.set(r.voice_id as string, list);
  }
  return rows.map((r) => toVoice(r, by.get(r.id as string) ?? [], copies.get(r.id as string) ?? []));
}

/** The account's voice, or null: another account's id is the same as an id that does not exist. */
export async function voiceOf(db: Queryable, accountId: string, voiceId: string): Promise<VoiceRecord | null> {
  const res = await db.query(`SELECT ${VOICE_COLS} FROM voices WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL`, [voiceId, accountId]);
  return (await withSamples(db, res.rows))[0] ?? null;
}

/** The account's voices, oldest first. */
export async function voicesOf(db: Queryable, accountId: string): Promise<VoiceRecord[]> {
  const res = await db.query(`SELECT ${VOICE_COLS} FROM voices WHERE account_id = $1 AND deleted_at IS NULL ORDER BY created_at, id`, [accountId]);
  return withSamples(db, res.rows);
}

/** Removes the voice and its sample bytes; false when the account has no such voice. */
export async function deleteVoice(db: TxDb, accountId: string, voiceId: string): Promise<boolean> {
  return db.tx(async (c) => {
    const res = await c.query('UPDATE voices SET deleted_at = now() WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL', [voiceId, accountId]);
    if (!res.rowCount) return false;
    const gone = await c.query('DELETE FROM voice_samples WHERE voice_id = $1 RETURNING file_id', [voiceId]);
    await c.query('DELETE FROM files WHERE id = ANY($1)', [gone.rows.map((r) => r.file_id as string)]);
    return true;
  });
}

/** Removes one sample of the account's voice, and its bytes; false when either is not the account's. */
export async function deleteSample(db: TxDb, accountId: string, voiceId: string, sampleId: string): Promise<boolean> {
  return db.tx(async (c) => {
    const res = await c.query(
      `DELETE FROM voice_samples s USING voices v
        WHERE s.id = $1 AND s.voice_id = $2 AND v.id = s.voice_id AND v.account_id = $3 AND v.deleted_at IS NULL RETURNING s.file_id`, [sampleId, voiceId, accountId]);
    if (!res.rowCount) return false;
    await c.query('DELETE FROM files WHERE id = $1', [res.rows[0]!.file_id]);
    return true;
  });
}

/** A sample's type and the file holding its bytes (read with `fileChunks`), when the voice and sample are the account's. */
export async function sampleAudio(db: Queryable, accountId: string, voiceId: string, sampleId: string): Promise<{ mimeType: string; fileId: string; sizeBytes: number } | null> {
  const res = await db.query(
    `SELECT s.mime_type, s.file_id, s.size_bytes FROM voice_samples s JOIN voices v ON v.id = s.voice_id
      WHERE s.id = $1 AND s.voice_id = $2 AND v.account_id = $3 AND v.deleted_at IS NULL`, [sampleId, voiceId, accountId]);
  const r = res.rows[0];
  return r ? { mimeType: r.mime_type as string, fileId: r.file_id as string, sizeBytes: Number(r.size_bytes) } : null;
}

/** Voices the account holds now, and voices it added since `since` (deleted ones included). */
export async function voiceCounts(db: Queryable, accountId: string, since: Date): Promise<{ held: number; addedSince: number }> {
  const res = await db.query(
    `SELECT count(*) FILTER (WHERE deleted_at IS NULL)::int AS held, count(*) FILTER (WHERE created_at >= $2)::int AS added
       FROM voices WHERE account_id = $1`, [accountId, since]);
  const r = res.rows[0]!;
  return { held: r.held as number, addedSince: r.added as number };
}

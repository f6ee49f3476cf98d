// Files: rows and their bytes in chunks (streamed in and out, never whole in memory), one account's each.
import type { Readable } from 'node:stream';
import type { Db, Queryable } from './db.js';
import { base62 } from './ids.js';

/** A file that has not expired (an expired one is gone for its owner at once; the sweep deletes its bytes). */
const LIVE = '(expires_at IS NULL OR expires_at > now())';

/** Bytes per stored chunk: a read or write of a file holds about one chunk at a time. */
export const CHUNK_BYTES = 256 * 1024;

export interface FileRow {
  id: string;
  accountId: string;
  purpose: string;
  filename: string;
  bytes: number;
  createdAt: Date;
  expiresAt: Date | null;
}

export function newFileId(): string {
  return `file-${base62(24)}`;
}

function toFile(r: Record<string, unknown>): FileRow {
  return {
    id: r.id as string, accountId: r.account_id as string, purpose: r.purpose as string, filename: r.filename as string,
    bytes: Number(r.bytes), createdAt: r.created_at as Date, expiresAt: (r.expires_at as Date | null) ?? null,
  };
}

/** The OpenAI `File` object. */
export function fileObject(f: FileRow): Record<string, unknown> {
  return {
    id: f.id, object: 'file', bytes: f.bytes, created_at: unix(f.createdAt), filename: f.filename, purpose: f.purpose,
    status: 'processed', ...(f.expiresAt ? { expires_at: unix(f.expiresAt) } : {}),
  };
}

export function unix(d: Date): number {
  return Math.floor(d.getTime() / 1000);
}

/**
 * Stores what `source` yields as a new file, a chunk at a time as it arrives (backpressure: the next
 * read waits for the chunk's insert). The file is listed only once whole; if the source fails (413,
 * a cut upload), everything stored is deleted and the error passed on.
 */
export async function storeFile(db: Db, f: { id?: string; accountId: string; purpose: string; filename: string; expiresAt?: Date | null;
  /** Left unlisted until `publishFile` (an upload whose other fields are still to be checked). */
  unlisted?: boolean;
  /** The account's storage quota: before each chunk is stored, the account's total with it must stay within `bytes`. */
  quota?: StorageQuota; },
source: Readable | AsyncIterable<Buffer | string>): Promise<FileRow> {
  const id = f.id ?? newFileId();
  // A source failed while no read is waiting (413, a cut upload) must not throw from its emitter:
  // the failure is found by the reads (or after them) below.
  const stream = 'on' in source && typeof source.on === 'function' ? source : null;
  stream?.on('error', () => undefined);
  await db.query('INSERT INTO files (id, account_id, purpose, filename, expires_at) VALUES ($1, $2, $3, $4, $5)',
    [id, f.accountId, f.purpose, f.filename, f.expiresAt ?? null]);
  let seq = 0;
  let bytes = 0;
  const parts: Buffer[] = [];
  let held = 0;
  const flush = async (): Promise<void> => {
    if (held === 0) return;
    const data = Buffer.concat(parts, held);
    parts.length = 0;
    held = 0;
    if (f.quota) {
      // The bytes this file has so far are in its row before any chunk is: a concurrent upload of the
      // same account counts them (each may pass the quota by at most the chunk in flight).
      const r = await db.query(`UPDATE files SET bytes = $2 WHERE id = $1
        RETURNING (SELECT coalesce(sum(bytes), 0) FROM files WHERE account_id = $3 AND id <> $1 AND ${LIVE})::bigint AS others`, [id, bytes, f.accountId]);
      const used = Number(r.rows[0]!.others) + bytes;
      if (used > f.quota.bytes) throw f.quota.refuse(used);
    }
    for (let at = 0; at < data.length; at += CHUNK_BYTES) {
      await db.query('INSERT INTO file_chunks (file_id, seq, data) VALUES ($1, $2, $3)', [id, seq++, data.subarray(at, at + CHUNK_BYTES)]);
    }
  };
  try {
    for await (const piece of source) {
      const b = typeof piece === 'string' ? Buffer.from(piece) : piece;
      parts.push(b);
      held += b.length;
      bytes += b.length;
      if (held >= CHUNK_BYTES) await flush();
    }
    if (stream?.errored) throw stream.errored;
    await flush();
    const r = await db.query("UPDATE files SET bytes = $2, status = $3 WHERE id = $1 RETURNING *", [id, bytes, f.unlisted ? 'uploading' : 'processed']);
    return toFile(r.rows[0]!);
  } catch (e) {
    await db.query('DELETE FROM files WHERE id = $1', [id]).catch(() => undefined);
    throw e;
  }
}

/** An upload stored whole and checked: listed from now on, with its purpose, expiring `expiresAfterSecs` after its creation (null: never). */
export async function publishFile(db: Queryable, id: string, purpose: string, expiresAfterSecs: number | null = null): Promise<FileRow> {
  const r = await db.query(`UPDATE files SET status = 'processed', purpose = $2,
      expires_at = CASE WHEN $3::int IS NULL THEN NULL ELSE created_at + $3::int * interval '1 second' END
    WHERE id = $1 RETURNING *`, [id, purpose, expiresAfterSecs]);
  return toFile(r.rows[0]!);
}

export interface StorageQuota {
  bytes: number;
  /** The refusal, given the account's total with what this upload has sent so far. */
  refuse: (usedBefore: number) => Error;
}

/** Bytes the account keeps stored: its files (listed, uploading, expired ones not yet swept excluded) and its voices' samples. */
export async function storageUsed(db: Queryable, accountId: string): Promise<number> {
  const r = await db.query(`SELECT coalesce(sum(bytes), 0)::bigint AS used FROM files WHERE account_id = $1 AND ${LIVE}`, [accountId]);
  return Number(r.rows[0]!.used);
}

/** Files past their `expires_at`: deleted with their bytes. Returns how many. */
export async function sweepExpired(db: Queryable): Promise<number> {
  const r = await db.query('DELETE FROM files WHERE expires_at <= now()');
  return r.rowCount ?? 0;
}

/** Deletes a file whatever its state (an upload that failed). */
export async function dropFile(db: Queryable, id: string): Promise<void> {
  await db.query('DELETE FROM files WHERE id = $1', [id]);
}

/** An account's file (null when it does not exist, is another account's, or is still uploading). */
export async function getFile(db: Queryable, accountId: string, id: string): Promise<FileRow | null> {
  const r = await db.query(`SELECT * FROM files WHERE id = $1 AND account_id = $2 AND status = 'processed' AND ${LIVE}`, [id, accountId]);
  return r.rows[0] ? toFile(r.rows[0]) : null;
}

/** A page of an account's files, in creation order (`asc` or `desc`), after the file `after`; one more than `limit` tells has_more. */
export async function listFiles(db: Queryable, accountId: string, o: { purpose?: string; limit: number; after?: string; order: 'asc' | 'desc' }): Promise<FileRow[]> {
  const cmp = o.order === 'asc' ? '>' : '<';
  const params: unknown[] = [accountId, o.limit + 1];
  let where = `account_id = $1 AND status = 'processed' AND ${LIVE}`;
  if (o.purpose) { params.push(o.purpose); where += ` AND purpose = $${params.length}`; }
  if (o.after) {
    params.push(o.after);
    where += ` AND (created_at, id) ${cmp} (SELECT created_at, id FROM files WHERE id = $${params.length} AND account_id = $1)`;
  }
  const r = await db.query(`SELECT * FROM files WHERE ${where} ORDER BY created_at ${o.order}, id ${o.order} LIMIT $2`, params);
  return r.rows.map(toFile);
}

export async function deleteFile(db: Queryable, accountId: string, id: string): Promise<boolean> {
  const r = await db.query(`DELETE FROM files WHERE id = $1 AND account_id = $2 AND status = 'processed' AND ${LIVE}`, [id, accountId]);
  return (r.rowCount ?? 0) > 0;
}

/** A file's bytes, one stored chunk at a time (each read is one query). */
export async function* fileChunks(db: Queryable, id: string): AsyncGenerator<Buffer> {
  for (let seq = 0; ; seq++) {
    const r = await db.query('SELECT data FROM file_chunks WHERE file_id = $1 AND seq = $2', [id, seq]);
    if (!r.rows[0]) return;
    yield r.rows[0].data as Buffer;
  }
}

/**
 * A file's lines (without their line ends, `\r\n` or `\n`), read chunk by chunk. A line longer than
 * `maxLine` bytes is not gathered: `null` stands for it, so no line holds more memory than that.
 */
export async function* fileLines(db: Queryable, id: string, maxLine: number): AsyncGenerator<Buffer | null> {
  let rest: Buffer = Buffer.alloc(0);
  let skipping = false;
  for await (const chunk of fileChunks(db, id)) {
    let buf = rest.length > 0 ? Buffer.concat([rest, chunk]) : chunk;
    let nl: number;
    while ((nl = buf.indexOf(0x0a)) >= 0) {
      if (skipping) { skipping = false; yield null; } else {
        const end = nl > 0 && buf[nl - 1] === 0x0d ? nl - 1 : nl;
        yield end > maxLine ? null : buf.subarray(0, end);
      }
      buf = buf.subarray(nl + 1);
    }
    if (skipping || buf.length > maxLine + 1) { skipping = true; rest = Buffer.alloc(0); } else rest = Buffer.from(buf);
  }
  if (skipping) yield null;
  else if (rest.length > 0) {
    const last = rest[rest.length - 1] === 0x0d ? rest.subarray(0, -1) : rest;
    yield last.length > maxLine ? null : last;
  }
}

/** Uploads that never finished (their process died mid-upload), older than `olderThanMs`: deleted. */
export async function sweepUploads(db: Queryable, olderThanMs: number): Promise<number> {
  const r = await db.query("DELETE FROM files WHERE status = 'uploading' AND created_at < now() - ($1::bigint * interval '1 millisecond')", [olderThanMs]);
  return r.rowCount ?? 0;
}

// Batches and their lines: created by the API, claimed by workers with FOR UPDATE SKIP LOCKED leases, each line finished once.
import type { Queryable } from './db.js';
import { base62 } from './ids.js';
import { unix } from './files.js';
import { toKey, type KeyRecord } from './keys.js';

export type BatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';

export interface BatchRow {
  id: string;
  accountId: string;
  keyId: string;
  endpoint: string;
  inputFileId: string;
  status: BatchStatus;
  expiresAt: Date;
  row: Record<string, unknown>;
}

export interface BatchError { code: string; message: string; param: string | null; line: number | null }

export function newBatchId(): string {
  return `batch_${base62(24)}`;
}

function toBatch(r: Record<string, unknown>): BatchRow {
  return {
    id: r.id as string, accountId: r.account_id as string, keyId: r.key_id as string, endpoint: r.endpoint as string,
    inputFileId: r.input_file_id as string, status: r.status as BatchStatus, expiresAt: r.expires_at as Date, row: r,
  };
}

const t = (v: unknown): number | null => (v instanceof Date ? unix(v) : null);

/** The OpenAI `Batch` object. */
export function batchObject(b: BatchRow): Record<string, unknown> {
  const r = b.row;
  const input = Number(r.input_tokens);
  const output = Number(r.output_tokens);
  const errors = r.errors as BatchError[] | null;
  // The spec's optional fields are absent, not null, until they have a value.
  const o: Record<string, unknown> = {
    ...(r.extra as Record<string, unknown>),
    id: b.id, object: 'batch', endpoint: b.endpoint, model: (r.model as string | null) ?? undefined,
    errors: errors ? { object: 'list', data: errors } : null,
    input_file_id: b.inputFileId, completion_window: r.completion_window, status: b.status,
    output_file_id: r.output_file_id ?? null, error_file_id: r.error_file_id ?? null,
    created_at: t(r.created_at), in_progress_at: t(r.in_progress_at), expires_at: t(r.expires_at), finalizing_at: t(r.finalizing_at),
    completed_at: t(r.completed_at), failed_at: t(r.failed_at), expired_at: t(r.expired_at), cancelling_at: t(r.cancelling_at),
    cancelled_at: t(r.cancelled_at),
    request_counts: { total: r.total, completed: r.completed, failed: r.failed },
    usage: {
      input_tokens: input, input_tokens_details: { cached_tokens: 0 }, output_tokens: output,
      output_tokens_details: { reasoning_tokens: Number(r.reasoning_tokens) }, total_tokens: input + output,
    },
    metadata: r.metadata ?? null,
  };
  for (const k of Object.keys(o)) if (o[k] === null && k !== 'metadata') delete o[k];
  return o;
}

export async function createBatch(db: Queryable, b: { accountId: string; keyId: string; endpoint: string; inputFileId: string;
  completionWindow: string; windowMs: number; metadata: unknown; extra: Record<string, unknown> }): Promise<BatchRow> {
  const r = await db.query(`INSERT INTO batches (id, account_id, key_id, endpoint, input_file_id, completion_window, status, metadata, extra, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, 'validating', $7, $8, now() + ($9::bigint * interval '1 millisecond')) RETURNING *`,
  [newBatchId(), b.accountId, b.keyId, b.endpoint, b.inputFileId, b.completionWindow,
    b.metadata === undefined || b.metadata === null ? null : JSON.stringify(b.metadata), JSON.stringify(b.extra), b.windowMs]);
  return toBatch(r.rows[0]!);
}

export async function getBatch(db: Queryable, accountId: string, id: string): Promise<BatchRow | null> {
  const r = await db.query('SELECT * FROM batches WHERE id = $1 AND account_id = $2', [id, accountId]);
  return r.rows[0] ? toBatch(r.rows[0]) : null;
}

/** An account's batches, newest first, after the batch `after`; one more than `limit` tells has_more. */
export async function listBatches(db: Queryable, accountId: string, o: { limit: number; after?: string }): Promise<BatchRow[]> {
  const params: unknown[] = [accountId, o.limit + 1];
  let where = 'account_id = $1';
  if (o.after) {
    params.push(o.after);
    where += ` AND (created_at, id) < (SELECT created_at, id FROM batches WHERE id = $${params.length} AND account_id = $1)`;
  }
  const r = await db.query(`SELECT * FROM batches WHERE ${where} ORDER BY created_at DESC, id DESC LIMIT $2`, params);
  return r.rows.map(toBatch);
}

/** Asks a validating or running batch to stop: the workers run no more of its lines and close it. Null: no such batch. */
export async function cancelBatch(db: Queryable, accountId: string, id: string): Promise<BatchRow | null> {
  const r = await db.query(`UPDATE batches SET status = 'cancelling', cancelling_at = now()
    WHERE id = $1 AND account_id = $2 AND status IN ('validating', 'in_progress') RETURNING *`, [id, accountId]);
  if (r.rows[0]) return toBatch(r.rows[0]);
  return getBatch(db, accountId, id);
}

// ---- the worker's side ----

const LEASE = "($2::bigint * interval '1 millisecond')";

/** A batch waiting for validation (or whose validator died), leased to `owner`. */
export async function claimValidation(db: Queryable, owner: string, leaseMs: number): Promise<BatchRow | null> {
  const r = await db.query(`UPDATE batches SET lease_owner = $1, lease_until = now() + ${LEASE}
    WHERE id = (SELECT id FROM batches WHERE status = 'validating' AND (lease_until IS NULL OR lease_until < now())
                ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING *`, [owner, leaseMs]);
  return r.rows[0] ? toBatch(r.rows[0]) : null;
}

/** Renews a batch lease; false when it is no longer ours (taken over, or the batch moved on). */
export async function renewBatch(db: Queryable, id: string, owner: string, leaseMs: number): Promise<boolean> {
  const r = await db.query(`UPDATE batches SET lease_until = now() + ${LEASE} WHERE id = $1 AND lease_owner = $3`, [id, leaseMs, owner]);
  return (r.rowCount ?? 0) > 0;
}

export interface NewLine { lineNo: number; customId: string; body: string }

/** Stores validated lines (each with its nonce for the ledger). */
export async function insertLines(db: Queryable, batchId: string, lines: NewLine[]): Promise<void> {
  if (lines.length === 0) return;
  await db.query(`INSERT INTO batch_lines (batch_id, line_no, custom_id, body, nonce)
    SELECT $1, * FROM unnest($2::int[], $3::text[], $4::text[], $5::text[])`,
  [batchId, lines.map((l) => l.lineNo), lines.map((l) => l.customId), lines.map((l) => l.body), lines.map(() => base62(16))]);
}

export async function clearLines(db: Queryable, batchId: string): Promise<void> {
  await db.query('DELETE FROM batch_lines WHERE batch_id = $1', [batchId]);
}

/** Validation passed: the batch runs (unless it was cancelled meanwhile). */
export async function startBatch(db: Queryable, id: string, owner: string, total: number, model: string | null): Promise<boolean> {
  const r = await db.query(`UPDATE batches SET status = 'in_progress', in_progress_at = now(), total = $3, model = $4, lease_owner = NULL, lease_until = NULL
    WHERE id = $1 AND lease_owner = $2 AND status = 'validating'`, [id, owner, total, model]);
  return (r.rowCount ?? 0) > 0;
}

/** Validation failed: the batch is failed with its errors, and its lines (if any were stored) go. */
export async function failBatch(db: Queryable, id: string, owner: string, errors: BatchError[]): Promise<void> {
  await db.query(`UPDATE batches SET status = 'failed', failed_at = now(), errors = $3, lease_owner = NULL, lease_until = NULL
    WHERE id = $1 AND lease_owner = $2 AND status IN ('validating', 'cancelling')`, [id, owner, JSON.stringify(errors)]);
  await clearLines(db, id);
}

export interface LineWork { batchId: string; lineNo: number; customId: string; body: string; nonce: string; keyId: string; endpoint: string }

/**
 * Up to `n` lines of running batches that nobody holds (never claimed, or their holder's lease ran
 * out: a dead or stuck worker), leased to `owner`. Oldest batch first, in line order.
 */
export async function claimLines(db: Queryable, owner: string, leaseMs: number, n: number): Promise<LineWork[]> {
  const r = await db.query(`WITH c AS (
      SELECT l.batch_id, l.line_no FROM batch_lines l JOIN batches b ON b.id = l.batch_id
       WHERE b.status = 'in_progress' AND b.expires_at > now() AND l.state = 'pending'
         AND (l.lease_until IS NULL OR l.lease_until < now())
       ORDER BY b.created_at, l.batch_id, l.line_no LIMIT $3 FOR UPDATE OF l SKIP LOCKED)
    UPDATE batch_lines l SET lease_owner = $1, lease_until = now() + ${LEASE}, attempts = l.attempts + 1
      FROM c, batches b WHERE l.batch_id = c.batch_id AND l.line_no = c.line_no AND b.id = l.batch_id
    RETURNING l.batch_id, l.line_no, l.custom_id, l.body, l.nonce, b.key_id, b.endpoint`, [owner, leaseMs, n]);
  return r.rows.map((x) => ({
    batchId: x.batch_id as string, lineNo: x.line_no as number, customId: x.custom_id as string, body: x.body as string,
    nonce: x.nonce as string, keyId: x.key_id as string, endpoint: x.endpoint as string,
  }));
}

/** Extends the leases `owner` holds on lines it is still running. */
export async function renewLines(db: Queryable, owner: string, leaseMs: number, lines: { batchId: string; lineNo: number }[]): Promise<void> {
  if (lines.length === 0) return;
  await db.query(`UPDATE batch_lines SET lease_until = now() + ${LEASE}
    WHERE lease_owner = $1 AND state = 'pending' AND (batch_id, line_no) IN (SELECT * FROM unnest($3::text[], $4::int[]))`,
  [owner, leaseMs, lines.map((l) => l.batchId), lines.map((l) => l.lineNo)]);
}

/** Gives a line back to be run again after `delayMs` (it was refused for rate or concurrency). */
export async function deferLine(db: Queryable, owner: string, batchId: string, lineNo: number, delayMs: number): Promise<void> {
  await db.query(`UPDATE batch_lines SET lease_until = now() + ($2::bigint * interval '1 millisecond'), lease_owner = NULL
    WHERE batch_id = $3 AND line_no = $4 AND lease_owner = $1 AND state = 'pending'`, [owner, delayMs, batchId, lineNo]);
}

export interface LineResult { ok: boolean; output: string; inputTokens: number; outputTokens: number; reasoningTokens: number }

/**
 * Writes a line's output once: only while it is pending, whoever runs it (a second run after a
 * takeover finds it done and writes nothing). The batch's counts and usage move in the same statement.
 */
export async function finishLine(db: Queryable, batchId: string, lineNo: number, res: LineResult): Promise<boolean> {
  const r = await db.query(`WITH l AS (
      UPDATE batch_lines SET state = 'done', ok = $3, output = $4, lease_owner = NULL, lease_until = NULL
       WHERE batch_id = $1 AND line_no = $2 AND state = 'pending' RETURNING 1)
    UPDATE batches SET completed = completed + (CASE WHEN $3 THEN 1 ELSE 0 END), failed = failed + (CASE WHEN $3 THEN 0 ELSE 1 END),
           input_tokens = input_tokens + $5, output_tokens = output_tokens + $6, reasoning_tokens = reasoning_tokens + $7
     WHERE id = $1 AND EXISTS (SELECT 1 FROM l) RETURNING 1`,
  [batchId, lineNo, res.ok, res.output, res.inputTokens, res.outputTokens, res.reasoningTokens]);
  return (r.rowCount ?? 0) > 0;
}

export type Closing = { batch: BatchRow; kind: 'complete' | 'cancel' | 'expire' };

/**
 * A batch ready to close, leased to `owner`: every line done (it completes), cancelled, or past its
 * window (it expires) with no line still held by a live lease. A completing batch moves to `finalizing`.
 */
export async function claimClosing(db: Queryable, owner: string, leaseMs: number): Promise<Closing | null> {
  const r = await db.query(`UPDATE batches b SET lease_owner = $1, lease_until = now() + ${LEASE},
      status = CASE WHEN b.status = 'in_progress' AND b.expires_at > now() THEN 'finalizing' ELSE b.status END,
      finalizing_at = CASE WHEN b.status = 'in_progress' AND b.expires_at > now() THEN now() ELSE b.finalizing_at END
    WHERE b.id = (
      SELECT x.id FROM batches x
       WHERE (x.lease_until IS NULL OR x.lease_until < now())
         AND (x.status IN ('finalizing', 'cancelling')
              OR (x.status = 'in_progress' AND (x.expires_at <= now()
                  OR NOT EXISTS (SELECT 1 FROM batch_lines p WHERE p.batch_id = x.id AND p.state = 'pending'))))
         AND NOT EXISTS (SELECT 1 FROM batch_lines p WHERE p.batch_id = x.id AND p.state = 'pending' AND p.lease_until > now() AND p.lease_owner IS NOT NULL)
       ORDER BY x.created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING b.*`, [owner, leaseMs]);
  const row = r.rows[0];
  if (!row) return null;
  const batch = toBatch(row);
  const kind = batch.status === 'cancelling' ? 'cancel' : batch.status === 'finalizing' ? 'complete' : 'expire';
  return { batch, kind };
}

/**
 * Lines not run (a cancelled or expired batch) become error lines with `code`; counted as failed.
 * Lines still held by a live lease are left to their runner. Returns how many lines are still pending.
 */
export async function closeLines(db: Queryable, batchId: string, code: string, message: string): Promise<number> {
  await db.query(`WITH l AS (
      UPDATE batch_lines SET state = 'done', ok = false,
             -- Written as the worker writes every other line (JSON.stringify: no spaces, this key order).
             output = '{"id":' || to_json('batch_req_' || nonce)::text || ',"custom_id":' || to_json(custom_id)::text
                      || ',"response":null,"error":{"code":' || to_json($2::text)::text || ',"message":' || to_json($3::text)::text || '}}'
       WHERE batch_id = $1 AND state = 'pending' AND (lease_until IS NULL OR lease_until < now() OR lease_owner IS NULL) RETURNING 1)
    UPDATE batches SET failed = failed + (SELECT count(*) FROM l) WHERE id = $1`, [batchId, code, message]);
  const r = await db.query("SELECT count(*)::int AS n FROM batch_lines WHERE batch_id = $1 AND state = 'pending'", [batchId]);
  return r.rows[0]!.n as number;
}

/** The output lines of a batch (successes or errors), in line order, a page at a time. */
/** A batch's finished lines: how many succeeded, how many failed. */
export async function doneCounts(db: Queryable, batchId: string): Promise<{ ok: number; bad: number }> {
  const res = await db.query("SELECT count(*) FILTER (WHERE ok)::int AS ok, count(*) FILTER (WHERE NOT ok)::int AS bad FROM batch_lines WHERE batch_id = $1 AND state = 'done'", [batchId]);
  return res.rows[0] as { ok: number; bad: number };
}

export async function* lineOutputs(db: Queryable, batchId: string, ok: boolean): AsyncGenerator<string> {
  let after = -1;
  for (;;) {
    const r = await db.query(`SELECT line_no, output FROM batch_lines WHERE batch_id = $1 AND state = 'done' AND ok = $2 AND line_no > $3
      ORDER BY line_no LIMIT 500`, [batchId, ok, after]);
    for (const row of r.rows) yield `${row.output as string}\n`;
    if (r.rows.length < 500) return;
    after = r.rows.at(-1)!.line_no as number;
  }
}

/** Closes a batch with its files; false when the lease was lost meanwhile (the caller deletes its files). */
export async function closeBatch(db: Queryable, id: string, owner: string, status: 'completed' | 'cancelled' | 'expired',
  outputFileId: string | null, errorFileId: string | null): Promise<boolean> {
  const at = status === 'completed' ? 'completed_at' : status === 'cancelled' ? 'cancelled_at' : 'expired_at';
  const r = await db.query(`UPDATE batches SET status = $3, ${at} = now(), output_file_id = $4, error_file_id = $5, lease_owner = NULL, lease_until = NULL
    WHERE id = $1 AND lease_owner = $2 AND status IN ('in_progress', 'finalizing', 'cancelling')`, [id, owner, status, outputFileId, errorFileId]);
  return (r.rowCount ?? 0) > 0;
}

/** Releases a batch lease without closing it (lines still running: tried again later). */
export async function releaseBatch(db: Queryable, id: string, owner: string): Promise<void> {
  await db.query('UPDATE batches SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2', [id, owner]);
}

/** The key a batch was created with (its lines are admitted and billed under it), as it stands now. */
export async function batchKey(db: Queryable, keyId: string): Promise<KeyRecord | null> {
  const r = await db.query('SELECT * FROM api_keys WHERE id = $1', [keyId]);
  return r.rows[0] ? toKey(r.rows[0]) : null;
}

// Receipts' queries: a request's ledger entries, unbilled requests, a batch line by its request id, the shared signing key, usage grouped.
import type { Queryable } from './db.js';

/** One ledger debit of a request (the whole request, or one part `#<seq>` of a session). */
export interface ReceiptEntry {
  idemKey: string;
  keyPrefix: string | null;
  amount: bigint;
  reason: string;
  model: string | null;
  usage: Record<string, unknown>;
  at: Date;
}

/** LIKE's own characters in a literal prefix. */
function likePrefix(s: string): string {
  return s.replace(/[\\%_]/g, (c) => `\\${c}`);
}

/**
 * The account's debits stored under `requestId`: the request itself, its parts (`<id>#<seq>`) and, when the
 * id was reused, `<id>~<nonce>` (the index on idem_key's text pattern finds them by prefix). Another
 * account's entries under the same id are never read: the account is in the query.
 */
export async function ledgerEntriesOf(db: Queryable, accountId: string, requestId: string): Promise<ReceiptEntry[]> {
  const p = likePrefix(requestId);
  const res = await db.query(
    `SELECT l.idem_key, k.prefix, l.amount_nd, l.reason, l.model, l.usage, l.created_at
       FROM ledger l LEFT JOIN api_keys k ON k.id = l.key_id
      WHERE l.account_id = $1 AND l.kind = 'debit'
        AND (l.idem_key = $2 OR l.idem_key LIKE $3 OR l.idem_key LIKE $4)
      ORDER BY l.created_at, l.id`, [accountId, requestId, `${p}#%`, `${p}~%`]);
  const own = new RegExp(`^${requestId.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(#\\d+)?(~[A-Za-z0-9]+)?$`);
  return res.rows.filter((r) => own.test(r.idem_key as string)).map((r) => ({
    idemKey: r.idem_key as string, keyPrefix: (r.prefix as string | null) ?? null, amount: -(r.amount_nd as bigint),
    reason: r.reason as string, model: (r.model as string | null) ?? null, usage: (r.usage as Record<string, unknown> | null) ?? {}, at: r.created_at as Date,
  }));
}

/** An admitted request that ended with nothing billed. */
export interface UnbilledRequest {
  accountId: string;
  requestId: string;
  keyId: string | null;
  route: string;
  model: string | null;
  outcome: string;
  startedAt: Date;
  endedAt: Date;
}

/** Stores a group of unbilled requests in one statement. */
export async function insertUnbilled(db: Queryable, rows: UnbilledRequest[]): Promise<void> {
  if (rows.length === 0) return;
  await db.query(
    `INSERT INTO unbilled_requests (account_id, request_id, key_id, route, model, outcome, started_at, ended_at)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::timestamptz[])`,
    [rows.map((r) => r.accountId), rows.map((r) => r.requestId), rows.map((r) => r.keyId), rows.map((r) => r.route), rows.map((r) => r.model),
      rows.map((r) => r.outcome), rows.map((r) => r.startedAt.toISOString()), rows.map((r) => r.endedAt.toISOString())]);
}

/** Deletes unbilled-request records that ended before `before` (free receipts are kept for a while, not for ever). */
export async function pruneUnbilled(db: Queryable, before: Date): Promise<number> {
  const res = await db.query('DELETE FROM unbilled_requests WHERE ended_at < $1', [before]);
  return res.rowCount ?? 0;
}

/** The account's unbilled requests under this id (several when a client reused it), with their key's prefix. */
export async function unbilledOf(db: Queryable, accountId: string, requestId: string): Promise<(UnbilledRequest & { keyPrefix: string | null })[]> {
  const res = await db.query(
    `SELECT u.*, k.prefix FROM unbilled_requests u LEFT JOIN api_keys k ON k.id = u.key_id
      WHERE u.account_id = $1 AND u.request_id = $2 ORDER BY u.started_at, u.id`, [accountId, requestId]);
  return res.rows.map((r) => ({
    accountId: r.account_id as string, requestId: r.request_id as string, keyId: (r.key_id as string | null) ?? null, route: r.route as string,
    model: (r.model as string | null) ?? null, outcome: r.outcome as string, startedAt: r.started_at as Date, endedAt: r.ended_at as Date,
    keyPrefix: (r.prefix as string | null) ?? null,
  }));
}

/** A batch line found by its nonce (its request id is `batch_req_<nonce>`), if the batch is the account's. */
export interface BatchLineRef {
  batchId: string; customId: string; state: string; ok: boolean | null; keyPrefix: string | null; endpoint: string; model: string | null; createdAt: Date;
}

export async function batchLineByNonce(db: Queryable, accountId: string, nonce: string): Promise<BatchLineRef | null> {
  const res = await db.query(
    `SELECT bl.batch_id, bl.custom_id, bl.state, bl.ok, b.endpoint, b.model, b.created_at, k.prefix
       FROM batch_lines bl JOIN batches b ON b.id = bl.batch_id LEFT JOIN api_keys k ON k.id = b.key_id
      WHERE bl.nonce = $1 AND b.account_id = $2`, [nonce, accountId]);
  const r = res.rows[0];
  if (!r) return null;
  return {
    batchId: r.batch_id as string, customId: r.custom_id as string, state: r.state as string, ok: (r.ok as boolean | null) ?? null,
    keyPrefix: (r.prefix as string | null) ?? null, endpoint: r.endpoint as string, model: (r.model as string | null) ?? null, createdAt: r.created_at as Date,
  };
}

/** The receipt signing key shared by every instance on this database: the stored one, or `made` stored first. */
export async function receiptKey(db: Queryable, made: () => { privateKey: string; publicKey: string }): Promise<{ privateKey: string; publicKey: string }> {
  const read = async () => (await db.query("SELECT private_key, public_key FROM receipt_keys WHERE id = 'default'")).rows[0];
  let row = await read();
  if (!row) {
    const k = made();
    // Two instances starting at once: the first insert wins and both read it back.
    await db.query("INSERT INTO receipt_keys (id, private_key, public_key) VALUES ('default', $1, $2) ON CONFLICT (id) DO NOTHING", [k.privateKey, k.publicKey]);
    row = await read();
  }
  return { privateKey: row!.private_key as string, publicKey: row!.public_key as string };
}

export type UsageDimension = 'day' | 'key' | 'route' | 'model';

/** One group of debits: its dimensions' values, the requests (ledger entries) and cost, and the units summed. */
export interface UsageRow {
  day?: string;
  key?: string | null;
  route?: string;
  model?: string | null;
  requests: number;
  cost: bigint;
  inputTokens: bigint;
  outputTokens: bigint;
  characters: bigint;
  audioInMs: bigint;
  audioOutMs: bigint;
}

const DIMENSION_SQL: Record<UsageDimension, string> = {
  day: "to_char(l.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
  key: 'k.prefix',
  route: 'l.reason',
  model: 'l.model',
};

/**
 * The account's debits in [from, to), grouped by the dimensions given, in their order: the one query behind
 * `GET /svc/v1/usage` and the console's usage charts, so both show the same numbers.
 */
export async function usageRows(db: Queryable, accountId: string, by: UsageDimension[], from: Date, to: Date): Promise<UsageRow[]> {
  const cols = by.map((d) => `${DIMENSION_SQL[d]} AS ${d === 'key' ? 'key_prefix' : d}`);
  const ms = (f: string) => `coalesce(sum(round((l.usage->>'${f}')::numeric * 1000)), 0)::bigint`;
  const res = await db.query(
    `SELECT ${[...cols, '(-sum(l.amount_nd))::bigint AS cost', 'count(*)::int AS n',
      "coalesce(sum((l.usage->>'input_tokens')::bigint), 0)::bigint AS input_tokens",
      "coalesce(sum((l.usage->>'output_tokens')::bigint), 0)::bigint AS output_tokens",
      "coalesce(sum((l.usage->>'characters')::bigint), 0)::bigint AS characters",
      `${ms('audio_seconds_in')} AS audio_in_ms`, `${ms('audio_seconds_out')} AS audio_out_ms`].join(', ')}
       FROM ledger l LEFT JOIN api_keys k ON k.id = l.key_id
      WHERE l.account_id = $1 AND l.kind = 'debit' AND l.created_at >= $2 AND l.created_at < $3
      ${by.length ? `GROUP BY ${by.map((_, i) => i + 1).join(', ')} ORDER BY ${by.map((_, i) => `${i + 1} NULLS FIRST`).join(', ')}` : ''}`,
    [accountId, from, to]);
  return res.rows.map((r) => {
    const row: UsageRow = {
      requests: r.n as number, cost: r.cost as bigint ?? 0n, inputTokens: r.input_tokens as bigint, outputTokens: r.output_tokens as bigint,
      characters: r.characters as bigint, audioInMs: r.audio_in_ms as bigint, audioOutMs: r.audio_out_ms as bigint,
    };
    if (by.includes('day')) row.day = r.day as string;
    if (by.includes('key')) row.key = (r.key_prefix as string | null) ?? null;
    if (by.includes('route')) row.route = r.route as string;
    if (by.includes('model')) row.model = (r.model as string | null) ?? null;
    return row;
  });
}

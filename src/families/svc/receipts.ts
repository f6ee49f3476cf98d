// GET /svc/v1/requests/{request_id} (a signed receipt), GET /svc/v1/receipts/key (its public key), GET /svc/v1/usage (JSON or CSV).
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { Ctx } from '../../server/context.js';
import { GatewayError } from '../../errors.js';
import { nanoToFixed9 } from '../../money.js';
import { billedReceipt, unbilledReceipt, type Canon } from '../../ledger/receipt.js';
import { batchLineByNonce, ledgerEntriesOf, unbilledOf, usageRows, type UsageDimension, type UsageRow } from '../../store/receipts.js';

const BATCH_REQUEST = /^batch_req_([A-Za-z0-9]+)$/;
const DIMENSIONS: readonly UsageDimension[] = ['model', 'key', 'route', 'day'];
const DAY_MS = 86_400_000;

function requestNotFound(id: string): GatewayError {
  return new GatewayError({ status: 404, code: 'not_found', param: 'request_id', message: `No request ${id} of this account has a receipt.` });
}

/** The receipt of `id` for the account, unsigned; null when the account has none under that id. */
export async function receiptOf(s: Services, accountId: string, id: string): Promise<{ [k: string]: Canon } | null> {
  // This instance's debits and free requests under way land first (a receipt asked for right after its response).
  await Promise.all([s.committer.settled(accountId, 1000), s.unbilled.flush()]);
  const head = { requestId: id, accountId };
  const entries = await ledgerEntriesOf(s.db, accountId, id);
  if (entries.length > 0) return billedReceipt(head, entries);
  const free = await unbilledOf(s.db, accountId, id);
  if (free.length > 0) return unbilledReceipt(head, free[free.length - 1]!);
  const batch = BATCH_REQUEST.exec(id);
  if (!batch) return null;
  // A batch line: its request id (as its output line names it) leads to its line, and the line to its ledger key.
  const line = await batchLineByNonce(s.db, accountId, batch[1]!);
  if (!line) return null;
  const ref: { [k: string]: Canon } = { id: line.batchId, custom_id: line.customId };
  const billed = await ledgerEntriesOf(s.db, accountId, `batch:${line.batchId}:${line.customId}`);
  if (billed.length > 0) return { ...billedReceipt(head, billed), batch: ref };
  if (line.state !== 'done') return null;
  return { ...unbilledReceipt(head, { keyPrefix: line.keyPrefix, route: `batch.${line.endpoint.replace(/^\/v1\//, '').replace(/\//g, '.')}`, model: line.model, outcome: 'failed', startedAt: line.createdAt, endedAt: line.createdAt }), batch: ref };
}

function param(q: URLSearchParams, name: string): string | null {
  const v = q.get(name);
  return v === null || v === '' ? null : v;
}

/** A bound of the usage window: a date (`2026-08-25`, midnight UTC) or an instant (ISO 8601). */
function instant(v: string, name: string): Date {
  const d = new Date(/^\d{4}-\d{2}-\d{2}$/.test(v) ? `${v}T00:00:00Z` : v);
  if (Number.isNaN(d.getTime())) throw new GatewayError({ status: 400, code: 'invalid_value', param: name, message: `${name} must be a date (YYYY-MM-DD) or an ISO 8601 time.` });
  return d;
}

function csvField(v: string | number | null): string {
  if (v === null) return '';
  let t = String(v);
  if (/^[=+\-@\t\r]/.test(t)) t = `'${t}`;
  return /[",\r\n]/.test(t) ? `"${t.replace(/"/g, '""')}"` : t;
}

function rowView(r: UsageRow, by: UsageDimension): Record<string, string | number | null> {
  return {
    [by]: r[by] ?? null, requests: r.requests, cost: nanoToFixed9(r.cost), input_tokens: Number(r.inputTokens), output_tokens: Number(r.outputTokens),
    characters: Number(r.characters), audio_in_ms: Number(r.audioInMs), audio_out_ms: Number(r.audioOutMs),
  };
}

async function usage(s: Services, ctx: Ctx): Promise<void> {
  const q = new URLSearchParams(ctx.query);
  const by = (param(q, 'group_by') ?? 'model') as UsageDimension;
  if (!DIMENSIONS.includes(by)) throw new GatewayError({ status: 400, code: 'invalid_value', param: 'group_by', message: `group_by must be one of ${DIMENSIONS.join(', ')}.` });
  const toParam = param(q, 'to');
  const fromParam = param(q, 'from');
  const to = toParam ? instant(toParam, 'to') : new Date();
  const from = fromParam ? instant(fromParam, 'from') : new Date(to.getTime() - 30 * DAY_MS);
  if (from.getTime() > to.getTime()) throw new GatewayError({ status: 400, code: 'invalid_value', param: 'from', message: 'from must not be after to.' });
  const format = param(q, 'format') ?? ((ctx.headers.accept ?? '').includes('text/csv') ? 'csv' : 'json');
  if (format !== 'csv' && format !== 'json') throw new GatewayError({ status: 400, code: 'invalid_value', param: 'format', message: 'format must be json or csv.' });
  await s.committer.settled(ctx.key!.accountId, 1000);
  const rows = (await usageRows(s.db, ctx.key!.accountId, [by], from, to)).map((r) => rowView(r, by));
  if (format === 'csv') {
    const cols = [by, 'requests', 'cost', 'input_tokens', 'output_tokens', 'characters', 'audio_in_ms', 'audio_out_ms'];
    const text = [cols, ...rows.map((r) => cols.map((c) => csvField(r[c] ?? null)))].map((f) => `${f.join(',')}\r\n`).join('');
    ctx.send(200, text, {}, 'text/csv; charset=utf-8');
    return;
  }
  ctx.json(200, { object: 'usage', from: from.toISOString(), to: to.toISOString(), group_by: by, data: rows });
}

export function receiptRoutes(s: Services): Route[] {
  return [
    { method: 'GET', path: '/v1/receipts/key', name: 'svc.receipts.key', scope: 'public', handler: async (ctx) => ctx.json(200, s.receipts.publicView()) },
    { method: 'GET', path: '/v1/requests/:request_id', name: 'svc.requests', scope: 'any', handler: async (ctx, { params }) => {
      let id: string;
      try { id = decodeURIComponent(params.request_id!); } catch { throw requestNotFound(params.request_id!); }
      const receipt = await receiptOf(s, ctx.key!.accountId, id);
      if (!receipt) throw requestNotFound(id);
      ctx.json(200, s.receipts.sign(receipt));
    } },
    { method: 'GET', path: '/v1/usage', name: 'svc.usage', scope: 'any', handler: (ctx) => usage(s, ctx) },
  ];
}

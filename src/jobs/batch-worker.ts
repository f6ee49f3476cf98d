// The batch worker: validates input files, runs lines through the live exchange with a collecting Downstream, closes batches.
import { hostname } from 'node:os';
import type { Config } from '../config.js';
import type { Db } from '../store/db.js';
import type { Downstream } from '../exchange/relay-http.js';
import type { BatchEndpoints, ExchangeClient } from '../exchange/client.js';
import { GatewayError, invalidValue, unsupportedParameter } from '../errors.js';
import { base62 } from '../store/ids.js';
import { fileLines, getFile, storeFile, deleteFile } from '../store/files.js';
import {
  batchKey, claimClosing, doneCounts, claimLines, claimValidation, clearLines, closeBatch, closeLines, deferLine, failBatch, finishLine,
  insertLines, lineOutputs, releaseBatch, renewBatch, renewLines, startBatch,
  type BatchError, type BatchRow, type Closing, type LineWork, type NewLine,
} from '../store/batches.js';
import type { KeyRecord } from '../store/keys.js';
import { log } from '../observe/log.js';

/** Moved to exchange/client.ts (a family builds them, and families do not import jobs); re-exported here. */
export type { BatchEndpoints, LineRunner } from '../exchange/client.js';

/** What the batch worker uses, and nothing more (never the whole Services). */
export interface BatchWorkerDeps {
  db: Db;
  /** Concurrency, poll interval and lease length. */
  batches: Config['batches'];
  /** The longest input line: the largest request body. */
  maxLineBytes: number;
  /** The Tollgate model id a name (or alias) stands for, if any. */
  modelId(name: string): string | undefined;
}

/** OpenAI's limit on requests in one batch. */
export const MAX_LINES = 50_000;
const MAX_ERRORS = 100;
/** A line's custom_id: OpenAI's bound. It becomes part of the line's ledger key and of an index of batch_lines. */
const MAX_CUSTOM_ID = 64;
const INSERT_GROUP = 500;

/**
 * One per `serve` process. Every poll it claims, with FOR UPDATE SKIP LOCKED leases, a batch to
 * validate, a batch to close, and as many lines as it has free slots; leases are renewed while the
 * work runs, so a lease that runs out means its holder died, and the next worker takes it over.
 */
export class BatchWorker {
  readonly owner = `${hostname()}:${process.pid}:${base62(8)}`;
  private readonly running = new Map<string, LineWork>();
  private readonly batchLeases = new Set<string>();
  private readonly keys = new Map<string, { key: KeyRecord | null; at: number }>();
  private timer: NodeJS.Timeout | undefined;
  private renewTimer: NodeJS.Timeout | undefined;
  private ticking = false;
  private again = false;
  private stopped = true;
  private readonly work = new Set<Promise<void>>();

  constructor(private readonly s: BatchWorkerDeps, private readonly endpoints: BatchEndpoints) {}

  private get cfg() { return this.s.batches; }

  start(): void {
    if (this.cfg.concurrency === 0) return;
    this.stopped = false;
    this.renewTimer = setInterval(() => { void this.renew(); }, Math.max(100, Math.floor(this.cfg.leaseMs / 3)));
    this.renewTimer.unref();
    this.schedule(0);
  }

  /** Stops claiming; lines already running finish and settle (or the deadline passes, and their leases lapse for another worker). */
  async stop(deadline: number): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    while (this.work.size > 0 && Date.now() < deadline) await Promise.race([...this.work, new Promise((r) => setTimeout(r, 50))]);
    clearInterval(this.renewTimer);
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => { void this.tick(); }, ms);
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    if (this.ticking) { this.again = true; return; }
    this.ticking = true;
    let busy = false;
    try {
      const v = await claimValidation(this.s.db, this.owner, this.cfg.leaseMs);
      if (v) { busy = true; this.track(this.validate(v)); }
      const c = await claimClosing(this.s.db, this.owner, this.cfg.leaseMs);
      if (c) { busy = true; this.track(this.close(c)); }
      const free = this.cfg.concurrency - this.running.size;
      if (free > 0) {
        const lines = await claimLines(this.s.db, this.owner, this.cfg.leaseMs, free);
        for (const l of lines) {
          this.running.set(`${l.batchId}/${l.lineNo}`, l);
          this.track(this.runLine(l).finally(() => { this.running.delete(`${l.batchId}/${l.lineNo}`); this.schedule(0); }));
        }
        if (lines.length === free) busy = true;
      }
    } catch (e) {
      log('warn', 'batch worker poll failed', { error: String((e as Error)?.message ?? e) });
    } finally {
      this.ticking = false;
    }
    this.schedule(busy || this.again ? 0 : this.cfg.pollMs);
    this.again = false;
  }

  private track(p: Promise<void>): void {
    const q = p.catch((e: unknown) => log('error', 'batch work failed', { error: String((e as Error)?.stack ?? e) }))
      .finally(() => { this.work.delete(q); });
    this.work.add(q);
  }

  private async renew(): Promise<void> {
    try {
      await renewLines(this.s.db, this.owner, this.cfg.leaseMs, [...this.running.values()]);
      for (const id of this.batchLeases) await renewBatch(this.s.db, id, this.owner, this.cfg.leaseMs);
    } catch (e) {
      log('warn', 'batch lease renewal failed', { error: String((e as Error)?.message ?? e) });
    }
  }

  // ---- validation ----

  private async validate(b: BatchRow): Promise<void> {
    this.batchLeases.add(b.id);
    try {
      await clearLines(this.s.db, b.id);
      const errors: BatchError[] = [];
      const err = (line: number | null, code: string, message: string, param: string | null = null) => {
        if (errors.length < MAX_ERRORS) errors.push({ code, message, param, line });
      };
      const file = await getFile(this.s.db, b.accountId, b.inputFileId);
      if (!file) {
        await failBatch(this.s.db, b.id, this.owner, [{ code: 'invalid_file', message: `The input file ${b.inputFileId} no longer exists.`, param: 'input_file_id', line: null }]);
        return;
      }
      const maxLine = this.s.maxLineBytes;
      const seen = new Set<string>();
      let group: NewLine[] = [];
      let lineNo = 0;
      let count = 0;
      let model: string | null = null;
      for await (const raw of fileLines(this.s.db, file.id, maxLine)) {
        lineNo++;
        if (raw === null) { err(lineNo, 'line_too_large', `Line ${lineNo} is longer than ${maxLine} bytes, the largest request body.`); continue; }
        if (raw.toString('utf8').trim() === '') continue;
        count++;
        if (count > MAX_LINES) { err(lineNo, 'too_many_requests', `A batch holds at most ${MAX_LINES} requests.`); break; }
        const line = parseLine(raw, lineNo, b.endpoint, seen, err);
        if (!line) continue;
        // The batch names its model as its lines' replies do: by the Tollgate id an alias stands for.
        model ??= line.model === null ? null : this.s.modelId(line.model) ?? line.model;
        if (errors.length > 0) continue;
        group.push({ lineNo, customId: line.customId, body: line.body });
        if (group.length >= INSERT_GROUP) { await insertLines(this.s.db, b.id, group); group = []; }
      }
      if (count === 0 && errors.length === 0) err(null, 'empty_file', 'The input file has no requests.', 'input_file_id');
      if (errors.length > 0) { await failBatch(this.s.db, b.id, this.owner, errors); return; }
      await insertLines(this.s.db, b.id, group);
      if (!(await startBatch(this.s.db, b.id, this.owner, count, model))) {
        // Cancelled (or taken over) meanwhile: whoever closes it finds no lines to run.
        await clearLines(this.s.db, b.id);
        await releaseBatch(this.s.db, b.id, this.owner);
      }
    } finally {
      this.batchLeases.delete(b.id);
    }
  }

  // ---- lines ----

  private async key(id: string): Promise<KeyRecord | null> {
    const hit = this.keys.get(id);
    if (hit && Date.now() - hit.at < 1000) return hit.key;
    const key = await batchKey(this.s.db, id);
    this.keys.set(id, { key, at: Date.now() });
    return key;
  }

  private async runLine(l: LineWork): Promise<void> {
    const requestId = `batch_req_${l.nonce}`;
    const ep = this.endpoints.runners.get(l.endpoint);
    const down = new Collector();
    const result = (status: number, body: string, ok: boolean) => {
      let parsed: unknown;
      try { parsed = JSON.parse(body); } catch { parsed = body; }
      const u = ok ? usageOf(parsed) : { inputTokens: 0, outputTokens: 0, reasoningTokens: 0 };
      return {
        ok, ...u,
        output: JSON.stringify({ id: requestId, custom_id: l.customId, response: { status_code: status, request_id: requestId, body: parsed }, error: null }),
      };
    };
    const failure = (e: GatewayError) => result(e.status, this.endpoints.render(e, requestId), false);
    let res;
    try {
      const key = await this.key(l.keyId);
      if (!ep) throw invalidValue('url', `${l.endpoint} is not served in batches.`);
      if (!key || key.revokedAt) throw new GatewayError({ code: 'invalid_api_key', message: 'The key this batch was created with has been revoked.' });
      const body = Buffer.from(l.body);
      if ((JSON.parse(l.body) as { stream?: unknown }).stream === true) {
        throw unsupportedParameter('stream', 'A batch request cannot stream: its reply is written to the output file. Remove `stream`.');
      }
      const client: ExchangeClient = Object.assign(down, {
        key, requestId, routeName: `batch.${ep.name}`, headers: { 'content-type': 'application/json' },
        debit: { id: `batch:${l.batchId}:${l.customId}`, nonce: l.nonce, batch: true },
      });
      await ep.run(client, body);
      if (down.status === 200 && down.complete) res = result(200, down.text(), true);
      else res = failure(new GatewayError({ code: 'upstream_malformed_response', message: 'The upstream reply was cut short.' }));
    } catch (e) {
      const ge = e instanceof GatewayError ? e : null;
      // A line larger than a usage limit of its key (429 marked not to retry) fails: waiting would never let it through.
      if (ge && ((ge.status === 429 && ge.headers?.['x-should-retry'] !== 'false') || (ge.status === 503 && ge.retryable))) {
        // Rate, concurrency, a usage limit or a store blip: the line waits its turn, it does not fail.
        const retry = Number(ge.headers?.['retry-after'] ?? 1);
        await deferLine(this.s.db, this.owner, l.batchId, l.lineNo, Math.max(1, retry) * 1000);
        return;
      }
      if (!ge) log('error', 'batch line failed', { batch: l.batchId, line: l.lineNo, error: String((e as Error)?.stack ?? e) });
      res = failure(ge ?? new GatewayError({ code: 'internal_error', message: 'The request failed inside the gateway.' }));
    }
    await finishLine(this.s.db, l.batchId, l.lineNo, res);
  }

  // ---- closing ----

  private async close(c: Closing): Promise<void> {
    const { batch: b, kind } = c;
    this.batchLeases.add(b.id);
    try {
      if (kind !== 'complete') {
        const left = await closeLines(this.s.db, b.id, kind === 'cancel' ? 'batch_cancelled' : 'batch_expired',
          kind === 'cancel' ? 'The batch was cancelled before this request ran.' : 'The batch expired before this request ran.');
        if (left > 0) { await releaseBatch(this.s.db, b.id, this.owner); return; }
      }
      const { ok, bad } = await doneCounts(this.s.db, b.id);
      // `output_expires_after` (checked when the batch was created): from the file's creation, as OpenAI anchors it.
      const after = (b.row.extra as { output_expires_after?: { seconds?: number } } | null)?.output_expires_after?.seconds;
      const expiresAt = (): Date | null => (typeof after === 'number' ? new Date(Date.now() + after * 1000) : null);
      const out = ok > 0 ? await storeFile(this.s.db, { accountId: b.accountId, purpose: 'batch_output', filename: `${b.id}_output.jsonl`, expiresAt: expiresAt() }, lineOutputs(this.s.db, b.id, true)) : null;
      const errs = bad > 0 ? await storeFile(this.s.db, { accountId: b.accountId, purpose: 'batch_output', filename: `${b.id}_error.jsonl`, expiresAt: expiresAt() }, lineOutputs(this.s.db, b.id, false)) : null;
      const status = kind === 'complete' ? 'completed' : kind === 'cancel' ? 'cancelled' : 'expired';
      if (!(await closeBatch(this.s.db, b.id, this.owner, status, out?.id ?? null, errs?.id ?? null))) {
        // Another worker took the batch over meanwhile: its files stand, ours go.
        for (const f of [out, errs]) if (f) await deleteFile(this.s.db, b.accountId, f.id);
      }
    } finally {
      this.batchLeases.delete(b.id);
    }
  }
}

/** The Downstream of a batch line: it keeps the reply (buffered: one send) for the output file. */
class Collector implements Downstream {
  readonly aborted = false;
  upstreamNs = 0n;
  status = 0;
  complete = false;
  private parts: (Buffer | string)[] = [];
  onAbort(): void { /* a batch line has no client to leave */ }
  send(status: number, body: string | Buffer | Uint8Array): void {
    this.status = status;
    this.parts = [typeof body === 'string' ? body : Buffer.from(body)];
    this.complete = true;
  }
  begin(status: number): void { this.status = status; }
  write(chunk: Uint8Array | string): undefined { this.parts.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk)); return undefined; }
  end(chunk?: Uint8Array | string): void { if (chunk) this.write(chunk); this.complete = true; }
  close(): void { this.complete = false; }
  text(): string { return this.parts.map((p) => p.toString()).join(''); }
}

function parseLine(raw: Buffer, lineNo: number, endpoint: string, seen: Set<string>,
  err: (line: number, code: string, message: string, param?: string | null) => void): { customId: string; body: string; model: string | null } | null {
  let v: unknown;
  try { v = JSON.parse(raw.toString('utf8')); } catch {
    err(lineNo, 'invalid_json_line', `Line ${lineNo} is not valid JSON.`);
    return null;
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) { err(lineNo, 'invalid_request', `Line ${lineNo} must be a JSON object.`); return null; }
  const o = v as Record<string, unknown>;
  if (typeof o.custom_id !== 'string' || o.custom_id === '') { err(lineNo, 'missing_required_parameter', `Line ${lineNo} needs a \`custom_id\` string.`, 'custom_id'); return null; }
  const idChars = [...o.custom_id].length;
  if (idChars > MAX_CUSTOM_ID || o.custom_id.includes('\u0000')) {
    err(lineNo, 'invalid_custom_id', idChars > MAX_CUSTOM_ID
      ? `Line ${lineNo}: \`custom_id\` is ${idChars} characters; at most ${MAX_CUSTOM_ID} are allowed.`
      : `Line ${lineNo}: \`custom_id\` contains a NUL character.`, 'custom_id');
    return null;
  }
  if (seen.has(o.custom_id)) { err(lineNo, 'duplicate_custom_id', `Line ${lineNo}: custom_id "${o.custom_id.slice(0, 64)}" is used by an earlier line; each must be unique.`, 'custom_id'); return null; }
  seen.add(o.custom_id);
  if (o.method !== 'POST') { err(lineNo, 'invalid_method', `Line ${lineNo}: \`method\` must be "POST".`, 'method'); return null; }
  if (o.url !== endpoint) { err(lineNo, 'mismatched_endpoint', `Line ${lineNo}: \`url\` must be the batch's endpoint ${endpoint}; got ${JSON.stringify(o.url)?.slice(0, 80)}.`, 'url'); return null; }
  if (!o.body || typeof o.body !== 'object' || Array.isArray(o.body)) { err(lineNo, 'invalid_request', `Line ${lineNo} needs a \`body\` object: the request.`, 'body'); return null; }
  const model = (o.body as { model?: unknown }).model;
  if (typeof model !== 'string') { err(lineNo, 'missing_required_parameter', `Line ${lineNo}: \`body.model\` is required.`, 'body.model'); return null; }
  return { customId: o.custom_id, body: JSON.stringify(o.body), model };
}

/** Token counts a reply reports (chat and embeddings: prompt/completion; Responses: input/output). */
function usageOf(body: unknown): { inputTokens: number; outputTokens: number; reasoningTokens: number } {
  const u = (body as { usage?: Record<string, unknown> } | null)?.usage;
  const n = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : 0);
  if (!u) return { inputTokens: 0, outputTokens: 0, reasoningTokens: 0 };
  const details = (u.completion_tokens_details ?? u.output_tokens_details) as Record<string, unknown> | undefined;
  return {
    inputTokens: n(u.prompt_tokens ?? u.input_tokens), outputTokens: n(u.completion_tokens ?? u.output_tokens),
    reasoningTokens: n(details?.reasoning_tokens),
  };
}

// One HTTP relay for any metered reply: upstream bytes through the meter to the client, with backpressure, an idle cut and one settle.
import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import type { GatewayError } from '../errors.js';
import type { UpstreamCall, Upstreams } from '../proxy/upstream.js';
import type { PoolEntry } from '../config.js';
import { upstreamMalformed } from '../proxy/upstream.js';
import { markUndone } from '../proxy/routed.js';
import { log } from '../observe/log.js';
import type { Charge } from './charge.js';
import type { Meter } from './meter.js';
import { unitsText, type Usage } from './usage.js';
import type { Nanodollars } from '../money.js';
import { nanoToDecimal, nanoToFixed9 } from '../money.js';

/** What a trace records of the exchange (observe/trace.ts's RequestTrace; optional: tracing may be off). */
export interface ExchangeTrace {
  upstreamBegins(): void;
  upstreamEnds(attrs?: Record<string, string | number | boolean>): void;
  stage(name: string, attrs?: Record<string, string | number | boolean>): void;
  event(name: string, attrs?: Record<string, string | number | boolean>): void;
  readonly attrs: Record<string, string | number | boolean>;
}

/** The client side of an exchange, as the front end provides it (no transport type leaks in here). */
export interface Downstream {
  readonly aborted: boolean;
  onAbort(fn: () => void): void;
  send(status: number, body: string | Buffer | Uint8Array, headers: Record<string, string>, contentType: string): void;
  begin(status: number, headers: Record<string, string>): void;
  /** Resolves at once (undefined) or when the client has drained its backlog. */
  write(chunk: Uint8Array | string): Promise<void> | undefined;
  end(chunk?: Uint8Array | string): void;
  /** Cuts the response short (a stream that cannot be completed honestly). */
  close(): void;
  /** Time spent waiting on the upstream, for metrics. */
  upstreamNs: bigint;
  /** The request's trace, when tracing is on. */
  readonly trace?: ExchangeTrace | null;
  /** Rate-limit headers every response to this client carries (set at admission). */
  rateHeaders?: Record<string, string> | null;
}

/** The GenAI semantic-convention attributes of a settled exchange, and its cost. */
function traced(t: ExchangeTrace, model: string, u: Usage, cost: Nanodollars): void {
  t.stage('tollgate.settle', { 'tollgate.cost_usd': nanoToDecimal(cost) });
  t.attrs['gen_ai.request.model'] = model;
  t.attrs['gen_ai.response.model'] = model;
  if (u.inputTokens > 0 || u.outputTokens > 0) {
    t.attrs['gen_ai.usage.input_tokens'] = u.inputTokens;
    t.attrs['gen_ai.usage.output_tokens'] = u.outputTokens;
  }
  if (u.characters > 0) t.attrs['tollgate.usage.characters'] = u.characters;
  if (u.audioInMs > 0) t.attrs['tollgate.usage.audio_in_ms'] = u.audioInMs;
  t.attrs['tollgate.usage.basis'] = u.basis;
  t.attrs['tollgate.cost_usd'] = nanoToDecimal(cost);
  t.attrs['tollgate.cost_nanodollars'] = Number(cost);
}

export interface Relay {
  down: Downstream;
  charge: Charge;
  call: UpstreamCall;
  meter: Meter;
  /** The family's reading of an upstream error reply. */
  upstreamError(res: IncomingMessage): Promise<GatewayError>;
  /** A reply that sends nothing for this long is cut (and billed for what it produced). */
  idleMs: number;
  requestId: string;
  /** Named in the log when a stream breaks. */
  label: string;
  /** Headers the family adds to a 200 reply (a fallback model's `x-tollgate-fallback`). */
  headers?: Record<string, string>;
  /** What the ledger entry keeps besides the meter's record (the model a fallback stood in for). */
  meta?: Record<string, unknown>;
  /** Turns a 200 reply's body into what the meter reads (a format conversion); it must end `complete` only when whole. */
  convert?: (res: IncomingMessage) => ReplyBody;
}

/** What a relay reads a 200 reply from: the upstream's own message, or a conversion of it. */
export interface ReplyBody extends Readable { readonly complete: boolean }

/** The largest buffered reply read from an upstream. */
const MAX_BUFFERED = 64 * 1024 * 1024;

/**
 * Waits for the upstream's answer; an error status, an unreachable host or a timeout bills nothing.
 * A 200 is metered as it passes: a buffered reply is priced, made durable, then sent whole (and
 * billed whole even if the client has left meanwhile); a stream is forwarded read by read and, when
 * it ends, breaks or the client leaves, billed for what it produced. The ledger commit never holds the response.
 */
export async function relay(r: Relay): Promise<void> {
  try {
    const started = process.hrtime.bigint();
    // A stream the client leaves is stopped and billed for what it produced. A buffered reply is not
    // stopped: the upstream cannot say what it produced before a cut, so it runs to the end and is
    // billed in full, as the client asked (and as OpenAI bills an abandoned non-streamed request).
    if (r.meter.mode === 'stream') r.down.onAbort(() => r.call.abort());
    r.down.trace?.upstreamBegins();
    const res = await r.call.response;
    r.down.upstreamNs = process.hrtime.bigint() - started;
    if (res.statusCode !== 200) {
      const err = await r.upstreamError(res);
      // 429 and 503 say nothing was generated: a request that opted in may fall back to another model.
      throw res.statusCode === 429 || res.statusCode === 503 ? markUndone(err) : err;
    }
    const head = r.meter.onResponse(res.headers);
    let headers = head.headers ? { ...r.charge.rateHeaders, ...head.headers } : r.charge.rateHeaders;
    if (r.headers) headers = { ...headers, ...r.headers };
    // A stream billed a fixed amount once anything is sent (speech) says so up front; others' cost is known at their end.
    const known = r.meter.mode === 'stream' ? r.meter.known?.() : undefined;
    if (known) headers = withCost(headers, r.charge.cost(known), known);
    res.setTimeout(r.idleMs, () => res.destroy(new Error(`no data for ${r.idleMs} ms`)));
    const body: ReplyBody = r.convert ? r.convert(res) : res;
    if (r.meter.mode === 'buffered') await buffered(r, body, started, head.contentType, headers);
    else await streamed(r, body, started, head.contentType, headers);
  } finally {
    // A pool's upstream slot is freed once the reply is done with, whatever ended it.
    r.call.finish?.();
    // Whatever ended the exchange, a charge still open (an error before its settle) bills nothing.
    if (r.charge.isOpen) await r.charge.release();
  }
}

async function buffered(r: Relay, res: ReplyBody, started: bigint, contentType: string, headers: Record<string, string>): Promise<void> {
  await read(res, r.meter);
  r.down.upstreamNs = process.hrtime.bigint() - started;
  r.down.trace?.upstreamEnds();
  const body = r.meter.onEnd(true);
  r.down.trace?.event('tollgate.metered');
  const u = r.meter.usage();
  const { cost } = await r.charge.settle(u, { extra: extra(r) });
  if (r.down.trace) traced(r.down.trace, r.label, u, cost);
  r.down.send(200, body, withCost(headers, cost, u), contentType);
}

/**
 * What a reply whose debit is known when its headers go out says of it: `x-tollgate-cost`, exactly the
 * debit in decimal dollars with 9 decimals, and `x-tollgate-units`, the units it was priced by as the
 * ledger names them (`input_tokens=12,output_tokens=30`).
 * Added to `headers` in one new object (`headers` may be the admission's shared rate-limit headers).
 */
function withCost(headers: Record<string, string>, cost: bigint, u: Usage): Record<string, string> {
  const out = { ...headers };
  out['x-tollgate-cost'] = nanoToFixed9(cost);
  out['x-tollgate-units'] = unitsText(u);
  return out;
}

/** What the ledger entry keeps besides the usage: the meter's own record, and whether the client left. */
function extra(r: Relay): Record<string, unknown> {
  const own = r.meta ? { ...r.meter.meta?.(), ...r.meta } : r.meter.meta?.() ?? {};
  return r.down.aborted ? { ...own, client_dropped: true } : own;
}

/** Feeds a whole reply to the meter (bounded); a reply cut short is malformed. */
function read(res: ReplyBody, meter: Meter): Promise<void> {
  return new Promise((resolve, reject) => {
    let size = 0;
    res.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BUFFERED) { res.destroy(); reject(upstreamMalformed()); return; }
      meter.onData(chunk);
    });
    res.once('end', () => (res.complete ? resolve() : reject(upstreamMalformed())));
    res.once('error', () => reject(upstreamMalformed()));
    res.once('close', () => { if (!res.complete) reject(upstreamMalformed()); });
  });
}

async function streamed(r: Relay, res: ReplyBody, started: bigint, contentType: string, headers: Record<string, string>): Promise<void> {
  const { down, meter, charge } = r;
  down.begin(200, { 'content-type': contentType, 'cache-control': 'no-cache', ...headers });
  let broken = false;
  let settled = false;
  // Complete: the upstream's final usage. Dropped or broken: the prompt plus what was produced so far.
  const settle = async (): Promise<boolean> => {
    settled = true;
    try {
      down.trace?.upstreamEnds();
      down.trace?.event('tollgate.metered');
      const u = meter.usage();
      const { cost } = await charge.settle(u, { extra: extra(r) });
      if (down.trace) traced(down.trace, r.label, u, cost);
      return true;
    } catch (e) {
      log('error', 'settle failed', { request_id: r.requestId, error: String((e as Error)?.message ?? e) });
      down.close();
      return false;
    }
  };
  // Read as `for await` reads, but with every variable that refers to a chunk cleared once it is metered
  // and sent. A suspended async function keeps its registers, and `for await` keeps the last iteration's
  // chunk, its output and the iterator's result while it waits for the next read (most of an open
  // stream's life) or for a slow client: a heap snapshot at 9,900 open streams showed each relay keeping
  // its last chunk so, and with it the 8 KiB Buffer slab it was cut from (1,256 slabs, 10.3 MB).
  const reads = (res as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  try {
    try {
      let step: IteratorResult<Buffer> | null = null;
      let chunk: Buffer | null = null;
      let out: Buffer | string = '';
      for (;;) {
        step = await reads.next();
        if (step.done) break;
        chunk = step.value;
        step = null;
        out = meter.onData(chunk);
        chunk = null;
        // The read that carries the end marker is held until the debit is durable: a client that has
        // seen its stream end has been billed for it, even if this process dies the next moment.
        if (meter.done && !settled && !(await settle())) return;
        // The running record (what the stream has produced, billed if this process dies) is written
        // before the output it covers is sent; the first one is waited for, so no output reaches the
        // client unrecorded. Later ones trail by at most a second's output.
        if (!settled && meter.produced && charge.progressDue()) {
          const first = !charge.hasRecord;
          const written = charge.progress(meter.usage());
          if (first) await written;
        }
        const wait = out.length > 0 ? down.write(out) : undefined;
        out = '';
        if (wait) await wait;
        if (down.aborted) break;
      }
    } finally {
      // What leaving a `for await` early does (the upstream reply is destroyed); nothing once it ended.
      await reads.return?.();
    }
    if (!res.complete && !down.aborted) broken = true;
  } catch {
    broken = !down.aborted;
  }
  down.upstreamNs = process.hrtime.bigint() - started;
  const tail = meter.onEnd(!broken && !down.aborted);
  if (!meter.done && !down.aborted) broken = true;
  if (!settled && !(await settle())) return;
  if (tail.length > 0 && !down.aborted) down.write(tail);
  if (broken) {
    // Headers are out: the only honest signal left is to cut the stream short.
    log('warn', 'upstream stream broke', { request_id: r.requestId, model: r.label });
    down.close();
    return;
  }
  down.end();
}

/** What relayCall needs beside the relay itself: the model whose upstream is called, and the request to send it. */
export interface CallSpec extends Omit<Relay, 'call' | 'idleMs' | 'label'> {
  model: { id: string; upstream: string; pool: readonly PoolEntry[] };
  /** The upstreams to route to when not the model's whole pool (a cloned voice's: those that hold it). */
  pool?: readonly PoolEntry[];
  /** The path, or one per upstream (a cloned voice's id on an ElevenLabs upstream is in it). */
  path: string | ((entry: PoolEntry) => string);
  headers: Record<string, string>;
  /** The body, or one per upstream (a cloned voice's id on each upstream). */
  body: Buffer | ((entry: PoolEntry) => Buffer);
}

/**
 * POSTs the request to the model's pool (src/proxy/routed.ts: retried elsewhere only while the upstream
 * cannot have done the work) and relays the reply (idle cut at the upstream's timeout, the model named
 * in the log). A call that cannot even start releases the charge: nothing was sent, nothing is billed.
 */
export async function relayCall(upstreams: Upstreams, c: CallSpec): Promise<void> {
  let call: UpstreamCall;
  try {
    const body = c.body;
    call = upstreams.route({ pool: c.pool ?? c.model.pool, method: 'POST', path: c.path, headers: c.headers, body: Buffer.isBuffer(body) ? () => body : body, requestId: c.requestId });
  } catch (e) {
    await c.charge.release();
    throw e;
  }
  await relay({
    down: c.down, charge: c.charge, call, meter: c.meter, upstreamError: c.upstreamError, requestId: c.requestId,
    idleMs: upstreams.config(c.model.upstream).timeoutMs, label: c.model.id, ...(c.convert ? { convert: c.convert } : {}),
  });
}

/**
 * Waits for the admission of a call that started before it answered (Charge.begin's `early`): refused,
 * the call is abandoned (the upstream sees its socket close; nothing was relayed, nothing is billed) and
 * the refusal is the answer. `counts`: how many such calls were admitted and refused (/metrics).
 */
export async function admitted(charge: Promise<Charge>, call: UpstreamCall, counts?: { admitted: number; refused: number }): Promise<Charge> {
  try {
    const c = await charge;
    if (counts) counts.admitted++;
    return c;
  } catch (e) {
    call.abort();
    call.finish?.();
    if (counts) counts.refused++;
    throw e;
  }
}

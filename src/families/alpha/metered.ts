// The proxied, metered request shared by the OpenAI-shaped text routes: admit, rewrite, proxy, meter, settle.
import type http from 'node:http';
import type { Services } from '../../server/app.js';
import type { Ctx } from '../../server/context.js';
import { admit, type Hold } from '../../gate/admission.js';
import { base62 } from '../../store/ids.js';
import { worstCase, type TokenUsage } from '../../ledger/pricing.js';
import type { ModelConfig } from '../../config.js';
import { SseMeter, type StreamMeter } from '../../meter/sse.js';
import { ResponsesSseMeter } from '../../meter/responses-sse.js';
import { collect, parseUpstreamJson, upstreamError, usageOf } from '../upstream-io.js';
import { settleUsage } from '../billing.js';
import { log } from '../../server/log.js';

export interface MeteredRequest {
  model: ModelConfig;
  body: Buffer;                         // the client's bytes
  parsed: Record<string, unknown>;      // the same, parsed
  upstreamPath: string;                 // e.g. /v1/chat/completions
  maxOutputTokens: number;              // worst case, all choices together
  /** Prompt tokens when the upstream reports none (a dropped stream before any usage). */
  promptEstimate(): number;
  /** Output tokens counted from a buffered reply that carried no usage. */
  outputEstimate(json: Record<string, unknown>): number;
  /** The upstream speaks the Responses API (its stream is Responses events; no stream_options to add). */
  responsesUpstream?: boolean;
  /** A body already mapped for the upstream (Responses → chat); sent as is. */
  upstreamBody?: Buffer;
  /** Reshapes the reply: a buffered JSON body, or a stream of events (Responses translation). */
  reshape?: { json(json: Record<string, unknown>): string; stream(): { start(): string; chunk(o: Record<string, unknown>): string; done(): string } };
}

/** Runs one metered request; `onJson` may reshape a buffered reply before it is sent (Responses translation). */
export async function metered(s: Services, ctx: Ctx, r: MeteredRequest): Promise<void> {
  const nonce = base62(12);
  const hold = await admit(s.admission, ctx.key!, `${ctx.requestId}/${nonce}`, worstCase(r.model, r.body.length, r.maxOutputTokens));
  const stream = r.parsed.stream === true;
  const streamOptions = (r.parsed.stream_options ?? {}) as Record<string, unknown>;
  const clientWantsUsage = stream && streamOptions.include_usage === true;
  const continuous = s.upstreams.config(r.model.upstream).continuousUsage;
  const outBody = r.upstreamBody ?? rewrite(r, stream, clientWantsUsage, continuous);
  const started = process.hrtime.bigint();
  const call = s.upstreams.call(r.model.upstream, 'POST', r.upstreamPath, ctx.headers, outBody, ctx.requestId);
  ctx.onAbort(call.abort);
  let settled = false;
  try {
    const res = await call.response;
    if (res.statusCode !== 200) throw await upstreamError(res, ctx.requestId);
    if (stream) {
      settled = true;
      await relay(s, ctx, res, hold, nonce, r, clientWantsUsage, continuous, started);
      return;
    }
    const buf = await collect(res);
    ctx.upstreamNs = process.hrtime.bigint() - started;
    const json = parseUpstreamJson(buf);
    const u = usageOf(json);
    const usage: TokenUsage = u.reported ? u : { input: r.promptEstimate(), output: r.outputEstimate(json) };
    settled = true;
    await settleUsage(s, ctx, hold, nonce, r.model, usage, { reasoning_tokens: u.reasoning, estimated: !u.reported });
    ctx.send(200, r.reshape ? r.reshape.json(json) : buf, hold.rateHeaders);
  } finally {
    if (!settled) await hold.release();
  }
}

/** Rewrites only when something must change: the upstream's model name, or the usage we must ask for. */
function rewrite(r: MeteredRequest, stream: boolean, clientWantsUsage: boolean, continuous: boolean): Buffer {
  const renameModel = r.parsed.model !== r.model.upstreamModel;
  const addUsage = stream && !r.responsesUpstream && (!clientWantsUsage || continuous);
  if (!renameModel && !addUsage) return r.body;
  const out = { ...r.parsed };
  if (renameModel) out.model = r.model.upstreamModel;
  if (addUsage) {
    out.stream_options = { ...((r.parsed.stream_options as object | null) ?? {}), include_usage: true, ...(continuous ? { continuous_usage_stats: true } : {}) };
  }
  return Buffer.from(JSON.stringify(out));
}

async function relay(s: Services, ctx: Ctx, res: http.IncomingMessage, hold: Hold, nonce: string, r: MeteredRequest,
  clientWantsUsage: boolean, continuous: boolean, started: bigint): Promise<void> {
  const translate = r.reshape?.stream();
  const meter: StreamMeter = r.responsesUpstream
    ? new ResponsesSseMeter()
    : new SseMeter({ stripUsageChunk: !clientWantsUsage, stripChunkUsage: continuous && !r.upstreamBody, translate });
  ctx.begin(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', ...hold.rateHeaders });
  if (translate) ctx.write(translate.start());
  let broken = false;
  // A stream that goes silent for the upstream's timeout is cut and billed for what it produced.
  const idleMs = s.upstreams.config(r.model.upstream).timeoutMs;
  res.setTimeout(idleMs, () => res.destroy(new Error(`no data for ${idleMs} ms`)));
  try {
    for await (const chunk of res) {
      const out = meter.push(chunk as Buffer);
      if (out.length > 0) { const wait = ctx.write(out); if (wait) await wait; }
      if (ctx.aborted) break;
    }
    if (!res.complete && !ctx.aborted) broken = true;
  } catch {
    broken = !ctx.aborted;
  }
  ctx.upstreamNs = process.hrtime.bigint() - started;
  if (!meter.done && !ctx.aborted) broken = true;
  // Complete: the upstream's final usage. Dropped or broken: the prompt plus what was produced so far.
  const usage = meter.final && meter.usage
    ? meter.usage
    : { input: meter.usage?.input || r.promptEstimate(), output: meter.producedTokens(), reasoning: meter.usage?.reasoning ?? 0 };
  await settleUsage(s, ctx, hold, nonce, r.model, usage, { reasoning_tokens: usage.reasoning, complete: meter.final, client_dropped: ctx.aborted });
  if (broken) {
    // Headers are out: the only honest signal left is to cut the stream short.
    log('warn', 'upstream stream broke', { request_id: ctx.requestId, model: r.model.id });
    ctx.close();
    return;
  }
  ctx.end();
}

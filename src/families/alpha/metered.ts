// One OpenAI-shaped text exchange: the charge, the only body rewrite we make, the upstream call, the meter and the relay.
import type { Services } from '../../services.js';
import type { ModelConfig, PoolEntry } from '../../config.js';
import { Charge } from '../../exchange/charge.js';
import { relay, admitted } from '../../exchange/relay-http.js';
import type { ExchangeClient } from '../../exchange/client.js';
import type { Meter } from '../../exchange/meter.js';
import { SseMeter, type SseMeterOptions } from '../../meter/sse.js';
import { ResponsesSseMeter } from '../../meter/responses-sse.js';
import { JsonMeter } from '../../meter/json.js';
import { StreamJsonMeter } from '../../meter/stream-json.js';
import { alpha } from './family.js';

/** Moved to exchange/client.ts; re-exported for the callers that import it from here. */
export type { ExchangeClient } from '../../exchange/client.js';

/** The response header a reply served by another model than the one asked for carries: the requested model's Tollgate id. */
export const FALLBACK_HEADER = 'x-tollgate-fallback';

/** An exchange served by a model after the first of its fallback chain (families/alpha/fallback.ts). */
export interface FallbackNote {
  /** The requested model's Tollgate id. */
  from: string;
}

export interface TextExchange {
  model: ModelConfig;
  body: Buffer;                         // the client's bytes
  parsed: Record<string, unknown>;      // the same, parsed
  upstreamPath: string;                 // e.g. /v1/chat/completions
  maxOutputTokens: number;              // worst case, all choices together
  /** The client bounded the output (max_tokens and the like): the worst case is a known cost the balance must cover. */
  bounded?: boolean;
  /** Prompt tokens counted by Tollgate, when the upstream reports none. */
  promptTokens(): number;
  /** Output tokens counted from a buffered reply that carried no usage. */
  outputTokens(json: Record<string, unknown>): number;
  /** The upstream speaks the Responses API (its stream is Responses events; no stream_options to add). */
  responsesUpstream?: boolean;
  /** A body already mapped for the upstream (Responses → chat), made for each upstream's model name (upstream_model per pool entry); sent as is. */
  upstreamBody?: (upstreamModel: string) => Buffer;
  /** The upstream tasks the request runs: choices (`n`) times prompts (a completions prompt list). */
  tasks?: number;
  /** Reshapes the reply: a buffered JSON body, or a stream of events (Responses translation). */
  reshape?: { json(json: Record<string, unknown>): string; stream(): NonNullable<SseMeterOptions['translate']> };
  /** Served by a fallback model: the reply's header and the ledger entry name the model asked for. */
  fallback?: FallbackNote;
}

/** Admits with the worst case, calls the upstream, and relays its reply through the meter that fits it. */
export async function textExchange(s: Services, ctx: ExchangeClient, x: TextExchange): Promise<void> {
  const up = s.upstreams.config(x.model.upstream);
  const tasks = x.tasks ?? 1;
  // Every task of a per-task upstream reads the whole prompt and is billed it: the hold covers each.
  const opening = Charge.begin(s, {
    key: ctx.key!, id: ctx.debit?.id ?? ctx.requestId, client: ctx, nonce: ctx.debit?.nonce, reason: ctx.routeName,
    model: ctx.debit?.batch ? { id: x.model.id, prices: x.model.batchPrices } : x.model,
    worst: { inputTokens: x.body.length * (up.usagePerTask ? tasks : 1), outputTokens: x.maxOutputTokens, characters: 0, audioInMs: 0, audioOutMs: 0 },
    known: x.bounded === true,
  });
  // Near a limit, admission answers before anything is sent upstream; far from every limit the call
  // starts at once and the hold is placed meanwhile (Charge.begin).
  let charge: Charge = opening.early ? (undefined as unknown as Charge) : await opening.charge;
  const stream = x.parsed.stream === true;
  const clientWantsUsage = stream && (x.parsed.stream_options as { include_usage?: unknown } | null | undefined)?.include_usage === true;
  // A whole reply from llama.cpp counts one task's usage: several tasks are asked as a stream, which reports each.
  const viaStream = !stream && up.usagePerTask && tasks > 1 && !x.upstreamBody && !x.reshape && !x.responsesUpstream;
  let meter: Meter;
  // Replies name the model by its Tollgate id (an alias answers with its model's id), never the upstream's name.
  const model = x.model.id;
  const prompt = new PromptCount(x.promptTokens);
  if (viaStream) meter = new StreamJsonMeter({ promptTokens: prompt.get, outputTokens: x.outputTokens, model });
  else if (!stream) meter = new JsonMeter({ promptTokens: prompt.get, outputTokens: x.outputTokens, reshape: x.reshape?.json, model });
  else if (x.responsesUpstream) meter = new ResponsesSseMeter(prompt.get, model, (u) => charge.cost(u));
  else {
    meter = new SseMeter({ stripUsageChunk: !clientWantsUsage, stripChunkUsage: up.continuousUsage && !x.upstreamBody, runningUsage: up.continuousUsage,
      translate: x.reshape?.stream(), promptTokens: prompt.get, model, cost: (u) => charge.cost(u),
      promptProgress: !up.promptProgress || x.upstreamBody ? undefined : x.parsed.return_progress === true ? 'keep' : 'strip' });
  }
  let call;
  try {
    call = s.upstreams.route({ pool: x.model.pool, method: 'POST', path: x.upstreamPath, headers: ctx.headers,
      body: bodyMaker(x, viaStream, stream, clientWantsUsage, up), requestId: ctx.requestId });
  } catch (e) {
    await (opening.early ? opening.charge.then((c) => c.release(), () => undefined) : charge.release());
    throw e;
  }
  // A large prompt is counted now, while the upstream reads it, so that no part of the reply's life
  // keeps the request's text for the count (docs/benchmarks.md, "Memory per open stream").
  if (x.body.length >= EAGER_PROMPT_COUNT_BYTES) prompt.get();
  if (opening.early) charge = await admitted(opening.charge, call, s.admission.overlap);
  // From here the relay owns the charge: it settles it or, whatever happens, releases it. Returned,
  // not awaited: this function's frame (and the request it holds) is let go of while the reply runs.
  return relay({
    down: ctx, charge, call, meter, idleMs: up.timeoutMs, requestId: ctx.requestId, label: x.model.id,
    upstreamError: (res) => alpha.upstreamError(res, ctx.requestId),
    ...(x.fallback ? { headers: { [FALLBACK_HEADER]: x.fallback.from }, meta: { fallback_from: x.fallback.from } } : {}),
  });
}

/** A request body from this size up has its prompt counted as soon as its upstream call starts. */
const EAGER_PROMPT_COUNT_BYTES = 8192;

/** The prompt's token count, counted at most once; the counting closure (and what it holds) is dropped once it has counted. */
class PromptCount {
  private n: number | undefined;
  constructor(private count: (() => number) | undefined) {}
  readonly get = (): number => {
    if (this.n === undefined) { this.n = this.count!(); this.count = undefined; }
    return this.n;
  };
}

/** The body per upstream of the pool, each naming the model its own way (upstream_model); made once per name. */
function bodyMaker(x: TextExchange, viaStream: boolean, stream: boolean, clientWantsUsage: boolean, up: { continuousUsage: boolean; promptProgress: boolean }): (e: PoolEntry) => Buffer {
  const bodies = new Map<string, Buffer>();
  return (e) => {
    let b = bodies.get(e.upstreamModel);
    if (!b) {
      b = x.upstreamBody ? x.upstreamBody(e.upstreamModel) : viaStream ? asStream(x, e.upstreamModel) : rewrite(x, e.upstreamModel, stream, clientWantsUsage, up);
      bodies.set(e.upstreamModel, b);
    }
    return b;
  };
}

/** Rewrites only when something must change: the upstream's model name, or the usage (and prompt progress) we must ask for. */
function rewrite(x: TextExchange, upstreamModel: string, stream: boolean, clientWantsUsage: boolean, up: { continuousUsage: boolean; promptProgress: boolean }): Buffer {
  const continuous = up.continuousUsage;
  const renameModel = x.parsed.model !== upstreamModel;
  const addUsage = stream && !x.responsesUpstream && (!clientWantsUsage || continuous);
  // llama.cpp's prompt count, before any output: what a stream cut before its usage is billed for its prompt.
  const addProgress = stream && !x.responsesUpstream && up.promptProgress && x.parsed.return_progress !== true;
  if (!renameModel && !addUsage && !addProgress) return x.body;
  const out = { ...x.parsed };
  if (renameModel) out.model = upstreamModel;
  if (addProgress) out.return_progress = true;
  if (addUsage) {
    out.stream_options = { ...((x.parsed.stream_options as object | null) ?? {}), include_usage: true, ...(continuous ? { continuous_usage_stats: true } : {}) };
  }
  return Buffer.from(JSON.stringify(out));
}

/** The buffered request as a stream with usage (StreamJsonMeter builds the whole reply back). */
function asStream(x: TextExchange, upstreamModel: string): Buffer {
  const opts = (x.parsed.stream_options as object | null | undefined) ?? {};
  return Buffer.from(JSON.stringify({ ...x.parsed, model: upstreamModel, stream: true, stream_options: { ...opts, include_usage: true } }));
}

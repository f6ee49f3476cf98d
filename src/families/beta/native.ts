// An upstream that speaks ElevenLabs' own API (`protocol: elevenlabs`): the family's requests go on as they came, only the voice and model ids resolved.
import type { Services } from '../../services.js';
import type { Ctx } from '../../server/context.js';
import type { ModelConfig, PoolEntry } from '../../config.js';
import type { WholeUnits } from '../../meter/synthesis.js';
import type { Multipart, FilePart } from '../../server/multipart.js';
import { GatewayError } from '../../errors.js';
import { Charge } from '../../exchange/charge.js';
import { relayCall } from '../../exchange/relay-http.js';
import { NativeMeter } from '../../meter/native.js';
import { buildForm, formBoundary, type FormPart } from '../../proxy/form.js';
import { beta } from './family.js';

/** True when the model's upstream is ElevenLabs' own API. */
export function isNative(s: Services, model: ModelConfig): boolean {
  return s.upstreams.config(model.upstream).protocol === 'elevenlabs';
}

/** `/v1/<route>/<voice id><suffix>` on the upstream, with the client's query string as it came (output_format, enable_logging…). */
export function nativePath(ctx: Ctx, route: string, voice: string | null, suffix = ''): string {
  const path = voice === null ? `/v1/${route}` : `/v1/${route}/${encodeURIComponent(voice)}${suffix}`;
  return ctx.query ? `${path}?${ctx.query}` : path;
}

/** A body per upstream of the pool: each gets the model's name there (`upstream_model` of its pool entry), one content type for all. */
export interface NativeBody { body: (entry: PoolEntry) => Buffer; contentType: string }

/** The JSON body as the client sent it, with only `model_id` set to the model's name at the upstream. */
export function nativeJson(body: Buffer | null): NativeBody {
  const raw = JSON.parse(body && body.length > 0 ? body.toString('utf8') : '{}') as Record<string, unknown>;
  return { body: (e) => Buffer.from(JSON.stringify({ ...raw, model_id: e.upstreamModel })), contentType: 'application/json' };
}

/** The form as the client sent it (every field in order, the file), with only `model_id` set to the model's name at the upstream. */
export function nativeForm(form: Multipart, file: FilePart): NativeBody {
  const parts: FormPart[] = [];
  for (const [name, values] of form.fields) {
    if (name === 'model_id') continue;
    for (const value of values) parts.push({ name, value });
  }
  const audio: FormPart = { name: file.field, filename: file.filename || 'audio', contentType: file.mimeType || 'application/octet-stream', data: file.data };
  const boundary = formBoundary();
  return {
    body: (e) => buildForm([...parts, { name: 'model_id', value: e.upstreamModel }, audio], boundary).body,
    contentType: `multipart/form-data; boundary=${boundary}`,
  };
}

export interface NativeCall {
  model: ModelConfig;
  /** The upstreams of the model's pool to route to (a cloned voice's: those that hold it); default the whole pool. */
  pool?: readonly PoolEntry[];
  /** The path, or one per upstream (a cloned voice's id at that upstream in it). */
  path: string | ((entry: PoolEntry) => string);
  body: NativeBody;
  /** What the request bills, measured by Tollgate before the call. */
  bill: WholeUnits;
  /** `buffered`: a JSON reply sent whole; `stream`: audio (or NDJSON) forwarded read by read. */
  mode: 'buffered' | 'stream';
  /** Headers for the client besides the rate headers. */
  headers: Record<string, string>;
}

/** Holds the measured cost, sends the request to the ElevenLabs upstream and relays its reply untouched; the upstream's accounting headers go in the ledger entry. */
export async function nativeExchange(s: Services, ctx: Ctx, c: NativeCall): Promise<void> {
  const charge = await Charge.open(s, {
    key: ctx.key!, id: ctx.requestId, model: c.model, reason: ctx.routeName,
    worst: { inputTokens: 0, outputTokens: 0, characters: c.bill.characters ?? 0, audioInMs: c.bill.audioInMs ?? 0, audioOutMs: 0 }, known: true,
  });
  await relayCall(s.upstreams, {
    down: ctx, charge, meter: new NativeMeter(c.mode, c.bill, c.headers), requestId: ctx.requestId,
    model: c.model, ...(c.pool ? { pool: c.pool } : {}), path: c.path, headers: { ...ctx.headers, 'content-type': c.body.contentType, accept: ctx.headers.accept ?? '*/*' }, body: c.body.body,
    upstreamError: (res) => beta.upstreamError(res, ctx.requestId),
  });
}

/** Fields of ElevenLabs' speech to text that leave Tollgate nothing to measure or nothing to relay: refused by name. */
export function refuseDetached(form: Multipart): void {
  for (const name of ['cloud_storage_url', 'source_url', 'webhook'] as const) {
    const v = form.field(name);
    if (v === undefined || v === '' || v === 'false' || v === 'null') continue;
    const msg = name === 'webhook'
      ? 'webhook is not supported: the transcript is answered on this request, where it is metered.'
      : `${name} is not supported: send the audio as file, so its length can be measured.`;
    throw new GatewayError({ status: 422, code: 'unsupported_parameter', param: name, message: msg,
      detail: [{ loc: ['body', name], msg, type: 'unsupported_parameter' }] });
  }
}

// POST /alpha/v1/audio/transcriptions and /translations: billed by the audio minutes Tollgate measures; what the
// upstream lacks (a response format, streaming, the name of its model field) is made up here from what it has.
import { randomBytes } from 'node:crypto';
import type { Services } from '../../services.js';
import type { Ctx } from '../../server/context.js';
import type { Route } from '../../server/router.js';
import type { ModelConfig, PoolEntry } from '../../config.js';
import { TRANSCRIPT_FORMATS, type TranscriptFormat, type TranscriptionCaps } from '../../config-transcription.js';
import { GatewayError, invalidValue } from '../../errors.js';
import { Charge } from '../../exchange/charge.js';
import { relayCall } from '../../exchange/relay-http.js';
import { TranscriptMeter } from '../../meter/transcript.js';
import { measureAudio } from '../../meter/audio.js';
import { readMultipart, type Multipart } from '../../server/multipart.js';
import { FORMAT_TYPES, renderTranscript, transcriptEvents } from './transcript-formats.js';
import { alpha } from './family.js';
import { audioExchange, oneOf } from './audio.js';

/**
 * What the upstream is asked for and what the client gets. `pass`: the client's format (and stream) as the upstream
 * makes it, relayed unchanged. `render`: the upstream is asked for `ask` and Tollgate makes the client's format
 * (or, with `events`, the SSE stream) from the whole reply.
 */
type Plan =
  | { kind: 'pass'; streamed: boolean }
  | { kind: 'render'; ask: 'json' | 'verbose_json'; format: TranscriptFormat; events: boolean };

/** Formats a stream is made of: the others answer whole, stream or not (as sim and OpenAI's whisper-1 do). */
const STREAMABLE: readonly TranscriptFormat[] = ['json', 'text'];

export function planTranscript(caps: TranscriptionCaps, format: TranscriptFormat, stream: boolean, model: string): Plan {
  const has = (f: TranscriptFormat) => caps.formats.includes(f);
  const streamed = stream && STREAMABLE.includes(format);
  if (streamed && caps.stream && has(format)) return { kind: 'pass', streamed: true };
  if (!streamed && has(format)) return { kind: 'pass', streamed: false };
  // Timed formats need verbose_json; text, json and a stream are made from json as well.
  const ask = has('verbose_json') ? 'verbose_json' : (format === 'json' || format === 'text') && has('json') ? 'json' : null;
  if (ask) return { kind: 'render', ask, format, events: streamed };
  const made = TRANSCRIPT_FORMATS.filter((f) => has(f) || has('verbose_json') || ((f === 'json' || f === 'text') && has('json')));
  throw new GatewayError({
    code: 'invalid_value', param: streamed ? 'stream' : 'response_format',
    message: streamed && has(format)
      ? `The model '${model}' cannot stream a transcription: its host does not stream, and does not answer json or verbose_json for Tollgate to stream from. Send stream=false.`
      : `Invalid value for 'response_format': '${format}' is not available for the model '${model}'. Available: ${made.map((f) => `'${f}'`).join(', ')}.`,
  });
}

/**
 * The upstream's multipart body: the client's fields and file, the model under the upstream's field name,
 * and `set` replacing (or, when undefined, removing) the fields Tollgate decides.
 */
function formBody(form: Multipart, modelField: string, model: string, set: Record<string, string[] | undefined>, boundary: string): Buffer {
  const parts: Buffer[] = [];
  const head = (h: string) => Buffer.from(`--${boundary}\r\n${h}\r\n\r\n`, 'utf8');
  const esc = (v: string) => v.replace(/["\r\n]/g, (c) => encodeURIComponent(c));
  const field = (name: string, v: string) => parts.push(head(`Content-Disposition: form-data; name="${esc(name)}"`), Buffer.from(v, 'utf8'), Buffer.from('\r\n'));
  field(modelField, model);
  for (const [name, values] of form.fields) {
    if (name === 'model' || name === modelField || name in set) continue;
    for (const v of values) field(name, v);
  }
  for (const [name, values] of Object.entries(set)) for (const v of values ?? []) field(name, v);
  for (const f of form.files) {
    parts.push(head(`Content-Disposition: form-data; name="${esc(f.field)}"; filename="${esc(f.filename || 'audio')}"\r\nContent-Type: ${f.mimeType || 'application/octet-stream'}`), f.data, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  return Buffer.concat(parts);
}

/** The form for each upstream of the pool (its model name: upstream_model of its entry), under one content type. */
function formBodies(form: Multipart, modelField: string, set: Record<string, string[] | undefined>): { body: (e: PoolEntry) => Buffer; contentType: string } {
  const boundary = `tollgate-${randomBytes(12).toString('hex')}`;
  return { body: (e) => formBody(form, modelField, e.upstreamModel, set, boundary), contentType: `multipart/form-data; boundary=${boundary}` };
}

/**
 * A transcription's JSON reply reports what is billed: `usage` is `{type: "duration", seconds}` with the
 * seconds Tollgate measured and bills (to the millisecond), whatever the upstream counted (sim and OpenAI
 * round up to a whole second). A translation has no usage in OpenAI's shape and gets none.
 */
export function billedUsage(json: Record<string, unknown>, audioMs: number): Record<string, unknown> {
  return { ...json, usage: { type: 'duration', seconds: audioMs / 1000 } };
}

/** Asks the upstream for `plan.ask` and answers the client's format (or stream) made from the whole reply. */
async function rendered(s: Services, ctx: Ctx, x: { model: ModelConfig; path: string; form: Multipart; audioMs: number; transcribe: boolean; plan: Extract<Plan, { kind: 'render' }> }): Promise<void> {
  const { model, plan } = x;
  const caps = s.upstreams.config(model.upstream).transcription;
  // Subtitles are cut at the segments: ask for them whatever granularity the client named for its own (unused) reply.
  const grains = plan.ask === 'verbose_json' ? ['segment'] : undefined;
  const up = formBodies(x.form, caps.modelField, { response_format: [plan.ask], stream: undefined, 'timestamp_granularities[]': grains });
  const charge = await Charge.open(s, {
    key: ctx.key!, id: ctx.requestId, client: ctx, model, reason: ctx.routeName,
    worst: { inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: x.audioMs, audioOutMs: 0 },

    // The audio was measured before the hold: a cost the balance or the ceiling cannot cover is refused (402).
    known: true,
  });
  const secs = x.audioMs / 1000;
  const meter = plan.events
    ? new TranscriptMeter(x.audioMs, (json) => transcriptEvents(json), 'text/event-stream; charset=utf-8')
    : new TranscriptMeter(x.audioMs, (json) => renderTranscript(x.transcribe ? billedUsage(json, x.audioMs) : json, plan.format, secs), FORMAT_TYPES[plan.format]);
  await relayCall(s.upstreams, {
    down: ctx, charge, meter, requestId: ctx.requestId,
    model: model, path: x.path, headers: { ...ctx.headers, 'content-type': up.contentType, accept: 'application/json' }, body: up.body,
    upstreamError: (res) => alpha.upstreamError(res, ctx.requestId),
  });
}

export function transcriptRoutes(s: Services): Route[] {
  return [transcriptRoute(s, 'transcriptions'), transcriptRoute(s, 'translations')];
}

function transcriptRoute(s: Services, task: 'transcriptions' | 'translations'): Route {
  const name = `audio.${task}`;
  const limit = s.config.limits.routeUploadBytes[name] ?? s.config.limits.uploadBytes;
  const path = `/v1/audio/${task}`;
  return {
    method: 'POST', path, name, scope: 'voice', metered: true, body: 'stream', bodyLimit: limit + 1024 * 1024,
    handler: async (ctx, { stream, body }) => {
      const form = await readMultipart(stream ?? body ?? Buffer.alloc(0), ctx.headers['content-type'], { maxFileBytes: limit, maxFiles: 1 });
      const file = form.files.find((f) => f.field === 'file');
      if (!file) throw invalidValue('file', "Missing required parameter: 'file' (the audio, as a multipart file).");
      const modelName = form.field('model');
      if (!modelName) throw invalidValue('model', "Missing required parameter: 'model'.");
      oneOf('response_format', form.field('response_format'), TRANSCRIPT_FORMATS);
      for (const g of form.fields.get('timestamp_granularities[]') ?? []) oneOf('timestamp_granularities[]', g, ['word', 'segment']);
      const format = (form.field('response_format') ?? 'json') as TranscriptFormat;
      const wantsStream = task === 'transcriptions' && form.field('stream') === 'true';
      const model = s.models.resolve(modelName, 'stt');
      const caps = s.upstreams.config(model.upstream).transcription;
      const plan = planTranscript(caps, format, wantsStream, model.id);
      // Billed by the length Tollgate measures in the file itself (frames counted, or decoded); unreadable → 400 before anything is held.
      const audio = await measureAudio(file.data, { ffmpeg: s.ffmpeg });
      const transcribe = task === 'transcriptions';
      if (plan.kind === 'render') { await rendered(s, ctx, { model, path, form, audioMs: audio.durationMs, transcribe, plan }); return; }
      const up = formBodies(form, caps.modelField, {});
      // A whole JSON transcription is read and its usage set to what is billed; other replies pass as made.
      const reported = transcribe && !plan.streamed && (format === 'json' || format === 'verbose_json');
      await audioExchange(s, ctx, {
        model, path, headers: { ...ctx.headers, 'content-type': up.contentType }, body: up.body,
        bill: { audioInMs: audio.durationMs }, mode: plan.streamed ? 'stream' : 'buffered', contentType: plan.streamed ? 'text/event-stream' : FORMAT_TYPES[format],
        ...(reported ? { meter: new TranscriptMeter(audio.durationMs, (json) => JSON.stringify(billedUsage(json, audio.durationMs)), FORMAT_TYPES[format]) } : {}),
      });
    },
  };
}

// POST /beta/v1/speech-to-text: the family's transcription (A6), billed by the audio minutes Tollgate measures from the upload.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { Ctx } from '../../server/context.js';
import type { Readable } from 'node:stream';
import { GatewayError } from '../../errors.js';
import { readMultipart, type Multipart } from '../../server/multipart.js';
import { Charge } from '../../exchange/charge.js';
import { relayCall } from '../../exchange/relay-http.js';
import { TranscriptMeter } from '../../meter/transcript.js';
import { buildForm, formBoundary, type FormPart } from '../../proxy/form.js';
import { chunkResponse, type Granularity } from './transcript.js';
import { beta } from './family.js';
import { measureRawPcm } from '../../meter/audio.js';
import { wav } from '../../audio/pcm.js';
import { routeUploadBytes } from '../../config.js';
import { sttParams } from './stt-params.js';
import { isNative, nativeExchange, nativeForm, nativePath, refuseDetached } from './native.js';
import type { ModelConfig, PoolEntry } from '../../config.js';

/** Measures an uploaded file's duration in milliseconds (frames counted or samples decoded, never a header); 400 when it cannot be. */
export type MeasureAudio = (data: Buffer, param: string) => Promise<number>;

function field422(field: string, msg: string, code: 'validation_error' | 'unsupported_parameter' = 'validation_error'): GatewayError {
  return new GatewayError({ status: 422, code, param: field, message: msg, detail: [{ loc: ['body', field], msg, type: code === 'validation_error' ? 'value_error' : code }] });
}

async function transcribe(s: Services, ctx: Ctx, stream: Readable, measure: MeasureAudio): Promise<void> {
  const form = await readMultipart(stream, ctx.headers['content-type'], { maxFileBytes: routeUploadBytes(s.config, 'beta.stt'), maxFiles: 1 });
  const modelId = form.field('model_id');
  if (!modelId) throw field422('model_id', 'model_id is required (scribe_v1).');
  const model = s.models.resolve(modelId, 'stt');
  if (isNative(s, model)) return transcribeNative(s, ctx, form, model, measure);
  // The client's other parameters: sent on to an upstream that takes them, else refused when they ask for something (stt-params.ts).
  const passed = sttParams(form, s.upstreams.config(model.upstream).transcription.sttParams, model.id);
  const file = form.files.find((f) => f.field === 'file');
  if (!file) throw field422('file', 'file is required: the audio to transcribe.');
  const granularity = (form.field('timestamps_granularity') ?? 'word') as Granularity;
  if (!['none', 'word', 'character'].includes(granularity)) throw field422('timestamps_granularity', 'timestamps_granularity must be none, word or character.');
  const temperature = form.field('temperature');
  if (temperature !== undefined && temperature !== '' && !(Number(temperature) >= 0 && Number(temperature) <= 2)) {
    throw field422('temperature', 'temperature must be a number from 0 to 2.');
  }
  const fileFormat = form.field('file_format');
  if (fileFormat !== undefined && fileFormat !== '' && fileFormat !== 'other' && fileFormat !== 'pcm_s16le_16') {
    throw field422('file_format', 'file_format must be pcm_s16le_16 or other.');
  }
  // Word times come from verbose_json (words, else segments); an upstream without it is asked for json, its words then spread evenly.
  const caps = s.upstreams.config(model.upstream).transcription;
  const verbose = caps.formats.includes('verbose_json');
  if (!verbose && !caps.formats.includes('json')) {
    throw field422('model_id', `The model '${model.id}' cannot answer here: its host answers neither json nor verbose_json transcriptions.`);
  }
  const rawPcm = fileFormat === 'pcm_s16le_16';
  // Raw 16 kHz 16-bit mono PCM has no container to read: its length is its duration, and it goes upstream
  // in a WAV header saying so (the transcription contract has no raw PCM flag); a container is refused by name.
  const audioMs = rawPcm ? measureRawPcm(file.data, 'file', (m) => field422('file_format', m)).durationMs : await measure(file.data, 'file');
  const language = form.field('language_code') || null;
  const charge = await Charge.open(s, {
    key: ctx.key!, id: ctx.requestId, client: ctx, model, reason: ctx.routeName,
    worst: { inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: audioMs, audioOutMs: 0 },

    // The audio was measured before the hold: a cost the balance or the ceiling cannot cover is refused (402).
    known: true,
  });
  // Each upstream's model name (upstream_model of its pool entry) takes this part's place per attempt.
  const modelPart: FormPart = { name: caps.modelField, value: model.upstreamModel };
  const parts: FormPart[] = [
    rawPcm
      ? { name: 'file', filename: 'audio.wav', contentType: 'audio/wav', data: wav(file.data.subarray(0, file.data.length & ~1), 16_000) }
      : { name: 'file', filename: file.filename || 'audio', contentType: file.mimeType || 'application/octet-stream', data: file.data },
    modelPart,
    { name: 'response_format', value: verbose ? 'verbose_json' : 'json' },
  ];
  if (verbose) parts.push({ name: 'timestamp_granularities[]', value: 'word' }, { name: 'timestamp_granularities[]', value: 'segment' });
  if (language) parts.push({ name: 'language', value: language });
  if (temperature !== undefined && temperature !== '') parts.push({ name: 'temperature', value: temperature });
  parts.push(...passed);
  // One content type for every upstream of the pool; each body names the model as that upstream knows it.
  const boundary = formBoundary();
  const bodyFor = (e: PoolEntry) => buildForm(parts.map((p) => (p === modelPart ? { name: caps.modelField, value: e.upstreamModel } : p)), boundary).body;
  const meter = new TranscriptMeter(audioMs, (json) => JSON.stringify(chunkResponse(json, { durationSecs: audioMs / 1000, granularity, languageCode: language })));
  await relayCall(s.upstreams, {
    down: ctx, charge, meter, requestId: ctx.requestId,
    model: model, path: '/v1/audio/transcriptions', headers: { ...ctx.headers, 'content-type': `multipart/form-data; boundary=${boundary}`, accept: 'application/json' }, body: bodyFor,
    upstreamError: (res) => beta.upstreamError(res, ctx.requestId),
  });
}

/** ElevenLabs itself: the form as sent, its JSON reply untouched, billed by the seconds measured here. */
async function transcribeNative(s: Services, ctx: Ctx, form: Multipart, model: ModelConfig, measure: MeasureAudio): Promise<void> {
  refuseDetached(form);
  const file = form.files.find((f) => f.field === 'file');
  if (!file) throw field422('file', 'file is required: the audio to transcribe.');
  const audioMs = form.field('file_format') === 'pcm_s16le_16' ? measureRawPcm(file.data, 'file', (m) => field422('file_format', m)).durationMs : await measure(file.data, 'file');
  await nativeExchange(s, ctx, {
    model, path: nativePath(ctx, 'speech-to-text', null), body: nativeForm(form, file), bill: { audioInMs: audioMs }, mode: 'buffered', headers: {},
  });
}

export function sttRoutes(s: Services, measure: MeasureAudio): Route[] {
  return [{
    method: 'POST', path: '/v1/speech-to-text', name: 'beta.stt', scope: 'voice', metered: true, body: 'stream', bodyLimit: routeUploadBytes(s.config, 'beta.stt') + 1024 * 1024,
    handler: (ctx, { stream }) => transcribe(s, ctx, stream!, measure),
  }];
}

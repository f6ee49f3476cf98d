// POST /beta/v1/speech-to-speech/{voice_id}[/stream]: voice conversion through the conversion contract, billed by the input's audio seconds.
import type { Readable } from 'node:stream';
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { Ctx } from '../../server/context.js';
import { GatewayError } from '../../errors.js';
import { readMultipart } from '../../server/multipart.js';
import { Charge } from '../../exchange/charge.js';
import { relayCall } from '../../exchange/relay-http.js';
import { SpeechMeter } from '../../meter/synthesis.js';
import { buildForm, formBoundary, type FormPart } from '../../proxy/form.js';
import { clonedPlaces, presetPlaces, type VoicePlaces } from '../../resolve/voices.js';
import { outputFormatOf } from './schemas.js';
import { voiceSettingsParams } from './speech-params.js';
import { production } from './produce.js';
import { voiceOf } from '../../store/voices.js';
import { voiceNotFound } from './speech-target.js';
import type { PresetLookup } from './tts.js';
import type { MeasureAudio } from './stt.js';
import { beta } from './family.js';
import { isNative, nativeExchange, nativeForm, nativePath } from './native.js';
import type { ModelConfig, PoolEntry } from '../../config.js';
import { measureRawPcm } from '../../meter/audio.js';
import { routeUploadBytes } from '../../config.js';

/** The family's default conversion model (A5). */
export const DEFAULT_STS_MODEL_ID = 'eleven_english_sts_v2';

function field422(field: string, msg: string): GatewayError {
  return new GatewayError({ status: 422, code: 'validation_error', param: field, message: msg, detail: [{ loc: ['body', field], msg, type: 'value_error' }] });
}

async function convert(s: Services, ctx: Ctx, voiceId: string, stream: Readable, measure: MeasureAudio, preset: PresetLookup): Promise<void> {
  const format = outputFormatOf(ctx.query);
  const form = await readMultipart(stream, ctx.headers['content-type'], { maxFileBytes: routeUploadBytes(s.config, ctx.routeName), maxFiles: 1 });
  const audio = form.files.find((f) => f.field === 'audio');
  if (!audio) throw field422('audio', 'audio is required: the speech to convert.');
  const settings = form.field('voice_settings');
  let voiceSettings: unknown;
  if (settings !== undefined && settings !== '' && settings !== 'null') {
    try { voiceSettings = JSON.parse(settings); } catch { throw field422('voice_settings', 'voice_settings must be a JSON object, sent as a string.'); }
    if (!voiceSettings || typeof voiceSettings !== 'object' || Array.isArray(voiceSettings)) throw field422('voice_settings', 'voice_settings must be a JSON object, sent as a string.');
  }
  const seed = form.field('seed');
  if (seed !== undefined && seed !== '' && !(/^\d{1,10}$/.test(seed) && Number(seed) <= 4_294_967_295)) throw field422('seed', 'seed must be an integer from 0 to 4294967295.');
  const fileFormat = form.field('file_format');
  if (fileFormat !== undefined && fileFormat !== '' && fileFormat !== 'other' && fileFormat !== 'pcm_s16le_16') throw field422('file_format', 'file_format must be pcm_s16le_16 or other.');
  const denoise = form.field('remove_background_noise');
  const model = s.models.resolve(form.field('model_id') || DEFAULT_STS_MODEL_ID, 'sts');
  if (isNative(s, model)) {
    // ElevenLabs itself: the form as sent (voice_settings and all), the voice by the upstream's id, billed by the seconds measured here.
    const places = await targetVoice(s, ctx, voiceId, model, preset);
    const audioMs = fileFormat === 'pcm_s16le_16' ? measureRawPcm(audio.data, 'audio', (m) => field422('file_format', m)).durationMs : await measure(audio.data, 'audio');
    await nativeExchange(s, ctx, {
      model, pool: places?.pool ?? model.pool,
      path: (e) => nativePath(ctx, 'speech-to-speech', places?.voiceAt(e.name) ?? voiceId, ctx.routeName === 'beta.sts.stream' ? '/stream' : ''),
      body: nativeForm(form, audio), bill: { audioInMs: audioMs }, mode: 'stream', headers: { 'request-id': ctx.requestId },
    });
    return;
  }
  // Sent on whole (speed too) to a model that lists voice_settings; else a setting that asks for something is refused.
  const voice = voiceSettingsParams(s.models.models, model, voiceSettings, ['body'], true);
  const presetVoice = preset(voiceId);
  const places = presetVoice === null ? (await targetVoice(s, ctx, voiceId, model, preset))! : presetPlaces(model, presetVoice);
  const plan = production(format, undefined, ctx.routeName === 'beta.sts');
  // Raw PCM is measured by its length and goes on with input_format saying so; a container declared raw is refused by name.
  const audioMs = fileFormat === 'pcm_s16le_16' ? measureRawPcm(audio.data, 'audio', (m) => field422('file_format', m)).durationMs : await measure(audio.data, 'audio');
  const charge = await Charge.open(s, {
    key: ctx.key!, id: ctx.requestId, client: ctx, model, reason: ctx.routeName,
    worst: { inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: audioMs, audioOutMs: 0 },

    // The audio was measured before the hold: a cost the balance or the ceiling cannot cover is refused (402).
    known: true,
  });
  // One form per upstream of the voice's pool (a cloned voice has its own id on each), all with one boundary: one content type.
  const boundary = formBoundary();
  const formFor = (e: PoolEntry) => {
    const parts: FormPart[] = [
      { name: 'file', filename: audio.filename || 'audio', contentType: audio.mimeType || 'application/octet-stream', data: audio.data },
      { name: 'model', value: e.upstreamModel },
      { name: 'voice', value: places.voiceAt(e.name) },
      { name: 'response_format', value: plan.upstreamFormat },
    ];
    if (fileFormat === 'pcm_s16le_16') parts.push({ name: 'input_format', value: 'pcm_s16le_16' });
    if (denoise === 'true' || denoise === 'True') parts.push({ name: 'remove_background_noise', value: 'true' });
    if (seed) parts.push({ name: 'seed', value: seed });
    if (voice.voice_settings !== undefined) parts.push({ name: 'voice_settings', value: JSON.stringify(voice.voice_settings) });
    return buildForm(parts, boundary).body;
  };
  const meter = new SpeechMeter({ audioInMs: audioMs }, plan.encoder(), plan.contentType, { 'request-id': ctx.requestId });
  await relayCall(s.upstreams, {
    down: ctx, charge, meter, requestId: ctx.requestId,
    model, pool: places.pool, path: '/v1/audio/voice-conversion', headers: { ...ctx.headers, 'content-type': `multipart/form-data; boundary=${boundary}`, accept: '*/*' }, body: formFor,
    upstreamError: (res) => beta.upstreamError(res, ctx.requestId),
  });
}

/** The caller's cloned voice on the model's pool: the upstreams that hold it and its id on each (none of them: refused); null for a preset voice. */
async function targetVoice(s: Services, ctx: Ctx, voiceId: string, model: ModelConfig, preset: PresetLookup): Promise<VoicePlaces | null> {
  if (preset(voiceId) !== null) return null;
  const v = await voiceOf(s.db, ctx.key!.accountId, voiceId);
  if (!v) throw voiceNotFound(voiceId);
  const places = clonedPlaces(model, v.copies);
  if (!places) {
    throw new GatewayError({ status: 400, code: 'invalid_value', param: 'voice_id',
      message: `The voice '${voiceId}' was cloned on another host than those of ${model.id}, so it cannot be converted to.` });
  }
  return places;
}

export function stsRoutes(s: Services, measure: MeasureAudio, preset: PresetLookup): Route[] {
  // The Python client (elevenlabs 2.78) calls the same operation /v1/voice-changer/{voice_id}.
  const route = (base: string, suffix: string, name: string): Route => ({
    method: 'POST', path: `/v1/${base}/:voice_id${suffix}`, name, scope: 'voice', metered: true, body: 'stream', bodyLimit: routeUploadBytes(s.config, name) + 1024 * 1024,
    handler: (ctx, { params, stream }) => convert(s, ctx, params.voice_id!, stream!, measure, preset),
  });
  return ['speech-to-speech', 'voice-changer'].flatMap((b) => [route(b, '', 'beta.sts'), route(b, '/stream', 'beta.sts.stream')]);
}

// POST /beta/v1/text-to-speech/{voice_id}[/stream][/with-timestamps]: the family's synthesis, billed by the characters of its text.
import type { Services } from '../../services.js';
import type { PoolEntry } from '../../config.js';
import type { Route } from '../../server/router.js';
import type { Ctx } from '../../server/context.js';
import { GatewayError } from '../../errors.js';
import { parseJson } from '../validate.js';
import { Charge } from '../../exchange/charge.js';
import { relayCall } from '../../exchange/relay-http.js';
import { SpeechMeter, TimestampsMeter } from '../../meter/synthesis.js';
import { checkTts, outputFormatOf } from './schemas.js';
import { speechTarget } from './speech-target.js';
import { speechParams } from './speech-params.js';
import { production } from './produce.js';
import { MAX_TTS_CHARACTERS } from './views.js';
import { beta } from './family.js';
import { isNative, nativeExchange, nativeJson, nativePath } from './native.js';

type Shape = 'audio' | 'timestamps';

/** A premade voice's upstream name, or null. */
export type PresetLookup = (voiceId: string) => string | null;

async function synthesize(s: Services, ctx: Ctx, voiceId: string, body: Buffer | null, shape: Shape, stream: boolean, preset: PresetLookup): Promise<void> {
  const req = parseJson(checkTts, body, ctx.headers['content-type']);
  const format = outputFormatOf(ctx.query);
  const characters = [...req.text].length;
  if (characters > MAX_TTS_CHARACTERS) {
    throw new GatewayError({ code: 'max_character_limit_exceeded', param: 'text',
      message: `text is ${characters} characters; one request takes at most ${MAX_TTS_CHARACTERS}.` });
  }
  if (req.pronunciation_dictionary_locators && req.pronunciation_dictionary_locators.length > 0) {
    // Dropping them would change what is spoken; no upstream of the contract takes them.
    throw new GatewayError({ status: 422, code: 'unsupported_parameter', param: 'pronunciation_dictionary_locators',
      message: 'pronunciation_dictionary_locators are not supported: this gateway has no pronunciation dictionaries.',
      detail: [{ loc: ['body', 'pronunciation_dictionary_locators'], msg: 'pronunciation dictionaries are not supported', type: 'unsupported_parameter' }] });
  }
  if ((req as Record<string, unknown>).audio_effects != null) {
    // Effects would change the audio, and no upstream of the contract applies them: refused, not dropped.
    throw new GatewayError({ status: 422, code: 'unsupported_parameter', param: 'audio_effects',
      message: 'audio_effects are not supported: no upstream of this gateway applies audio effects.',
      detail: [{ loc: ['body', 'audio_effects'], msg: 'audio effects are not supported', type: 'unsupported_parameter' }] });
  }
  const target = await speechTarget(s, ctx.key!.accountId, voiceId, req.model_id, preset);
  if (isNative(s, target.model)) {
    // ElevenLabs itself: a premade voice by its own id, a cloned one by the id the upstream gave it; the body as sent.
    const suffix = `${stream ? '/stream' : ''}${shape === 'timestamps' ? '/with-timestamps' : ''}`;
    await nativeExchange(s, ctx, {
      model: target.model, pool: target.places.pool,
      path: (e) => nativePath(ctx, 'text-to-speech', target.cloned ? target.places.voiceAt(e.name) : voiceId, suffix),
      body: nativeJson(body), bill: { characters },
      mode: shape === 'timestamps' && !stream ? 'buffered' : 'stream', headers: { 'request-id': ctx.requestId, 'character-cost': String(characters) },
    });
    return;
  }
  // Refused here, before anything is held, when the voice's model cannot honour one (voice_settings included).
  const extra = speechParams(s.models.models, target.model, req);
  const plan = production(format, s.upstreams.config(target.model.upstream).speech, !stream);
  const charge = await Charge.open(s, {
    key: ctx.key!, id: ctx.requestId, client: ctx, model: target.model, reason: ctx.routeName,
    worst: { inputTokens: 0, outputTokens: 0, characters, audioInMs: 0, audioOutMs: 0 }, known: true,
  });
  // `extra` carries voice_settings.speed as OpenAI's `speed` (speech-params.ts).
  // One body per upstream of the voice's pool: a cloned voice has its own id on each.
  const upstreamBody = (e: PoolEntry) => Buffer.from(JSON.stringify({
    ...extra, model: e.upstreamModel, input: req.text, voice: target.places.voiceAt(e.name), response_format: plan.upstreamFormat,
  }));
  const headers = { 'request-id': ctx.requestId, 'character-cost': String(characters) };
  const meter = shape === 'audio'
    ? new SpeechMeter({ characters }, plan.encoder(), plan.contentType, headers)
    : new TimestampsMeter(stream ? 'stream' : 'buffered', req.text, plan.pcmRate, plan.encoder(), headers);
  await relayCall(s.upstreams, {
    down: ctx, charge, meter, requestId: ctx.requestId,
    model: target.model, pool: target.places.pool, path: '/v1/audio/speech', headers: { ...ctx.headers, 'content-type': 'application/json', accept: '*/*' }, body: upstreamBody,
    upstreamError: (res) => beta.upstreamError(res, ctx.requestId),
  });
}

export function ttsRoutes(s: Services, preset: PresetLookup): Route[] {
  const route = (suffix: string, shape: Shape, stream: boolean, name: string): Route => ({
    method: 'POST', path: `/v1/text-to-speech/:voice_id${suffix}`, name, scope: 'voice', metered: true,
    handler: (ctx, { params, body }) => synthesize(s, ctx, params.voice_id!, body, shape, stream, preset),
  });
  return [
    route('', 'audio', false, 'beta.tts'),
    route('/stream', 'audio', true, 'beta.tts.stream'),
    route('/with-timestamps', 'timestamps', false, 'beta.tts.timestamps'),
    route('/stream/with-timestamps', 'timestamps', true, 'beta.tts.stream.timestamps'),
  ];
}

// POST /alpha/v1/audio/speech, metered by the characters of the text, and the audio exchange it shares with the
// transcription routes (transcripts.ts), billed by the minutes of audio Tollgate measures from the upload.
import { Type } from '@sinclair/typebox';
import type { Services } from '../../services.js';
import type { Ctx } from '../../server/context.js';
import type { Route } from '../../server/router.js';
import type { ModelConfig, PoolEntry } from '../../config.js';
import { GatewayError } from '../../errors.js';
import { Charge } from '../../exchange/charge.js';
import { relayCall } from '../../exchange/relay-http.js';
import { WholeInputMeter, type WholeInput } from '../../meter/speech.js';
import { presetVoice, OPENAI_VOICES, clonedPlaces, presetPlaces, type VoicePlaces } from '../../resolve/voices.js';
import { voiceOf } from '../../store/voices.js';
import { CONTENT_TYPES } from '../../audio/index.js';
import { IDENTITY, SpeechMeter } from '../../meter/synthesis.js';
import type { Meter } from '../../exchange/meter.js';
import type { ReplyBody } from '../../exchange/relay-http.js';
import type { IncomingMessage } from 'node:http';
import { speechPlan } from './speech-plan.js';
import { compile, parseJson } from '../validate.js';
import { alpha } from './family.js';

export const SPEECH_FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
/** OpenAI's limit on the text of one speech request. */
export const MAX_SPEECH_CHARS = 4096;

const SpeechRequest = Type.Object({
  model: Type.String({ minLength: 1 }),
  input: Type.String({ minLength: 1, expected: 'the text to speak, a non-empty string' }),
  // The spec's VoiceIdsOrCustomVoice: a voice name, or a custom voice `{"id": …}` (nothing else in the object).
  voice: Type.Union([Type.String({ minLength: 1 }), Type.Object({ id: Type.String({ minLength: 1 }) }, { additionalProperties: false })],
    { expected: `a voice name (${OPENAI_VOICES.join(', ')}) or {"id": "<voice id>"}` }),
  response_format: Type.Optional(Type.String()),
  stream_format: Type.Optional(Type.String()),
  speed: Type.Optional(Type.Number({ minimum: 0.25, maximum: 4 })),
  instructions: Type.Optional(Type.String()),
}, { additionalProperties: true });
const checkSpeech = compile(SpeechRequest);

function invalidValue(param: string, message: string): GatewayError {
  return new GatewayError({ code: 'invalid_value', param, message });
}

export function oneOf(param: string, value: string | undefined, allowed: readonly string[]): void {
  if (value !== undefined && !allowed.includes(value)) {
    throw invalidValue(param, `Invalid value for '${param}': '${value.slice(0, 64)}'. Supported values are: ${allowed.map((a) => `'${a}'`).join(', ')}.`);
  }
}

/** A cloned voice's id: 20 base62 characters (store/voices.ts). */
const VOICE_ID = /^[0-9A-Za-z]{20}$/;

/**
 * The model and upstream voice a speech request speaks with: one of the family's voice names with the
 * model `model` names; or a voice the caller's account cloned (`POST /beta/v1/voices/add`), by id as a
 * string or as `{"id": …}`, with the model that cloned it (no other model knows the voice), at that
 * model's price. Another account's voice is not found (404), exactly as an id that never existed; a
 * string that is not shaped like a voice id, or the other family's premade voice, gets the list of names (400).
 */
async function speechVoice(s: Services, accountId: string, voice: string | { id: string }, model: ModelConfig): Promise<{ model: ModelConfig; places: VoicePlaces }> {
  const id = typeof voice === 'string' ? voice : voice.id;
  const preset = presetVoice(id);
  if (preset?.family === 'alpha') return { model, places: presetPlaces(model, preset.upstreamVoice) };
  const cloned = !preset && VOICE_ID.test(id) ? await voiceOf(s.db, accountId, id) : null;
  if (cloned) {
    // Spoken by the upstreams of its model's pool that cloned it, each with its own id of the voice.
    const m = s.models.resolve(cloned.modelId, 'tts');
    const places = clonedPlaces(m, cloned.copies);
    if (!places) throw invalidValue('voice', `The voice '${id}' was cloned on other hosts than those of ${m.id}, so it cannot be spoken.`);
    return { model: m, places };
  }
  if (preset || (typeof voice === 'string' && !VOICE_ID.test(id))) {
    throw invalidValue('voice', `Invalid value for 'voice': '${id.slice(0, 64)}'. Supported voices are: ${OPENAI_VOICES.map((v) => `'${v}'`).join(', ')}, or the id of a voice this account cloned.`);
  }
  throw new GatewayError({ code: 'voice_not_found', param: 'voice', message: `No voice with id '${id.slice(0, 64)}' was found.` });
}

/** Holds exactly the whole input's price, calls the upstream and relays its reply through a WholeInputMeter. */
export async function audioExchange(s: Services, ctx: Ctx, x: {
  model: ModelConfig; path: string; headers: Record<string, string>; body: Buffer | ((entry: PoolEntry) => Buffer); bill: WholeInput;
  /** The upstreams of the model's pool to route to (a cloned voice's: those that hold it); default the whole pool. */
  pool?: readonly PoolEntry[]; mode: 'buffered' | 'stream'; contentType: string;
  /** When Tollgate makes the format itself: the meter that encodes, or the conversion of the reply. */
  meter?: Meter; convert?: (res: IncomingMessage) => ReplyBody;
}): Promise<void> {
  const charge = await Charge.open(s, {
    key: ctx.key!, id: ctx.requestId, client: ctx, model: x.model, reason: ctx.routeName,
    worst: { inputTokens: 0, outputTokens: 0, characters: x.bill.characters ?? 0, audioInMs: x.bill.audioInMs ?? 0, audioOutMs: 0 },
    // The characters to speak, or the audio measured before the hold, are known: a hold the balance cannot cover is refused.
    known: true,
  });
  await relayCall(s.upstreams, {
    down: ctx, charge, meter: x.meter ?? new WholeInputMeter(x.mode, x.bill, x.contentType), convert: x.convert, requestId: ctx.requestId,
    model: x.model, ...(x.pool ? { pool: x.pool } : {}), path: x.path, headers: x.headers, body: x.body,
    upstreamError: (res) => alpha.upstreamError(res, ctx.requestId),
  });
}

function speechRoute(s: Services): Route {
  return {
    method: 'POST', path: '/v1/audio/speech', name: 'audio.speech', scope: 'voice', metered: true,
    handler: async (ctx, { body }) => {
      const req = parseJson(checkSpeech, body, ctx.headers['content-type']);
      oneOf('response_format', req.response_format, SPEECH_FORMATS);
      oneOf('stream_format', req.stream_format, ['audio', 'sse']);
      const characters = [...req.input].length;
      if (characters > MAX_SPEECH_CHARS) throw invalidValue('input', `The input has ${characters} characters; at most ${MAX_SPEECH_CHARS} are spoken in one request.`);
      const { model, places } = await speechVoice(s, ctx.key!.accountId, req.voice, s.models.resolve(req.model, 'tts'));
      const format = (req.response_format ?? 'mp3') as typeof SPEECH_FORMATS[number];
      // The upstream's own format passes through; another is made here from what it makes (docs/upstreams.md).
      const plan = speechPlan(format, s.upstreams.config(model.upstream).speech, s.ffmpeg, req.stream_format === 'sse');
      const { stream_format: _audio, ...rest } = req;
      // One body per upstream of the voice's pool: each its model name and its id of the voice.
      const out = (e: PoolEntry) => Buffer.from(JSON.stringify(plan.kind === 'upstream'
        ? { ...req, model: e.upstreamModel, voice: places.voiceAt(e.name) }
        : { ...rest, model: e.upstreamModel, voice: places.voiceAt(e.name), response_format: plan.from }));
      const contentType = req.stream_format === 'sse' ? 'text/event-stream' : CONTENT_TYPES[format];
      await audioExchange(s, ctx, {
        model, pool: places.pool, path: '/v1/audio/speech', headers: ctx.headers, body: out,
        bill: { characters }, mode: 'stream', contentType,
        ...(plan.kind === 'encode' ? { meter: new SpeechMeter({ characters }, plan.encoder(), contentType, {}) } : {}),
        ...(plan.kind === 'ffmpeg' ? { meter: new SpeechMeter({ characters }, IDENTITY, contentType, {}), convert: (res: IncomingMessage) => plan.convert(res, ctx.requestId) } : {}),
      });
    },
  };
}

export function audioRoutes(s: Services): Route[] {
  return [speechRoute(s)];
}

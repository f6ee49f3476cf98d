// POST /alpha/v1/audio/speech, metered by the characters of the text, and the audio exchange it shares with the
// transcription routes (transcripts.ts), billed by the minutes of audio Tollgate measures from the upload.
import { Type } from '@sinclair/typebox';
import type { Services } from '../../services.js';
import type { Ctx } from '../../server/context.js';
import type { Route } from '../../server/router.js';
import type { ModelConfig } from '../../config.js';
import { GatewayError } from '../../errors.js';
import { Charge } from '../../exchange/charge.js';
import { relay } from '../../exchange/relay-http.js';
import { WholeInputMeter, type WholeInput } from '../../meter/speech.js';
import { presetVoice, OPENAI_VOICES } from '../../resolve/voices.js';
import { CONTENT_TYPES } from '../../audio/index.js';
import { compile, parseJson } from '../validate.js';
import { alpha } from './family.js';

export const SPEECH_FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
/** OpenAI's limit on the text of one speech request. */
export const MAX_SPEECH_CHARS = 4096;

const SpeechRequest = Type.Object({
  model: Type.String({ minLength: 1 }),
  input: Type.String({ minLength: 1, expected: 'the text to speak, a non-empty string' }),
  voice: Type.Union([Type.String({ minLength: 1 }), Type.Object({ id: Type.String({ minLength: 1 }) }, { additionalProperties: true })],
    { expected: `a voice name (${OPENAI_VOICES.join(', ')}) or {"id": …}` }),
  response_format: Type.Optional(Type.String()),
  stream_format: Type.Optional(Type.String()),
  speed: Type.Optional(Type.Number({ minimum: 0.25, maximum: 4 })),
  instructions: Type.Optional(Type.String()),
}, { additionalProperties: true });
const checkSpeech = compile(SpeechRequest);

function invalidValue(param: string, message: string): GatewayError {
  return new GatewayError({ status: 400, code: 'invalid_value', param, message });
}

export function oneOf(param: string, value: string | undefined, allowed: readonly string[]): void {
  if (value !== undefined && !allowed.includes(value)) {
    throw invalidValue(param, `Invalid value for '${param}': '${value.slice(0, 64)}'. Supported values are: ${allowed.map((a) => `'${a}'`).join(', ')}.`);
  }
}

/** Holds exactly the whole input's price, calls the upstream and relays its reply through a WholeInputMeter. */
export async function audioExchange(s: Services, ctx: Ctx, x: {
  model: ModelConfig; path: string; headers: Record<string, string>; body: Buffer; bill: WholeInput; mode: 'buffered' | 'stream'; contentType: string;
}): Promise<void> {
  const charge = await Charge.open(s, {
    key: ctx.key!, id: ctx.requestId, model: x.model, reason: ctx.routeName,
    worst: { inputTokens: 0, outputTokens: 0, characters: x.bill.characters ?? 0, audioInMs: x.bill.audioInMs ?? 0, audioOutMs: 0 },
  });
  let call;
  try {
    call = s.upstreams.call(x.model.upstream, 'POST', x.path, x.headers, x.body, ctx.requestId);
  } catch (e) {
    await charge.release();
    throw e;
  }
  await relay({
    down: ctx, charge, call, meter: new WholeInputMeter(x.mode, x.bill, x.contentType), idleMs: s.upstreams.config(x.model.upstream).timeoutMs,
    requestId: ctx.requestId, label: x.model.id, upstreamError: (res) => alpha.upstreamError(res, ctx.requestId),
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
      const model = s.models.resolve(req.model, 'tts');
      const voiceName = typeof req.voice === 'string' ? req.voice : req.voice.id;
      const voice = presetVoice(voiceName);
      if (!voice || voice.family !== 'alpha') {
        throw invalidValue('voice', `Invalid value for 'voice': '${voiceName.slice(0, 64)}'. Supported voices are: ${OPENAI_VOICES.map((v) => `'${v}'`).join(', ')}.`);
      }
      const format = (req.response_format ?? 'mp3') as typeof SPEECH_FORMATS[number];
      const out = { ...req, model: model.upstreamModel, voice: voice.upstreamVoice };
      await audioExchange(s, ctx, {
        model, path: '/v1/audio/speech', headers: ctx.headers, body: Buffer.from(JSON.stringify(out)),
        bill: { characters }, mode: 'stream', contentType: req.stream_format === 'sse' ? 'text/event-stream' : CONTENT_TYPES[format],
      });
    },
  };
}

export function audioRoutes(s: Services): Route[] {
  return [speechRoute(s)];
}

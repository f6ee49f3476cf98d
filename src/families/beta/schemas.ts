// TypeBox schemas and enumerations of the ElevenLabs-shaped requests: the fields Tollgate reads are typed, and enumerations are closed (422 outside them).
import { Type } from '@sinclair/typebox';
import { GatewayError } from '../../errors.js';
import { compile } from '../validate.js';

/**
 * `output_format`: codec_sampleRate[_bitrate]; the REST enumeration, default mp3_44100_128. The list is the
 * official clients' own (elevenlabs Python 2.78 `TextToSpeechConvertRequestOutputFormat`, the Node client's
 * enum of the same name): every value there is made here (docs/compatibility.md, "Output formats").
 */
export const OUTPUT_FORMATS = [
  'mp3_22050_32', 'mp3_24000_48', 'mp3_44100_32', 'mp3_44100_64', 'mp3_44100_96', 'mp3_44100_128', 'mp3_44100_192',
  'pcm_8000', 'pcm_16000', 'pcm_22050', 'pcm_24000', 'pcm_32000', 'pcm_44100', 'pcm_48000', 'ulaw_8000', 'alaw_8000',
  'opus_48000_32', 'opus_48000_64', 'opus_48000_96', 'opus_48000_128', 'opus_48000_192',
  'wav_8000', 'wav_16000', 'wav_22050', 'wav_24000', 'wav_32000', 'wav_44100', 'wav_48000',
] as const;
/** The formats that only a whole reply has (a WAV header); the stream-input sockets do not offer them. */
export const WHOLE_FILE_FORMATS: readonly OutputFormat[] = OUTPUT_FORMATS.filter((f) => f.startsWith('wav_'));
export type OutputFormat = typeof OUTPUT_FORMATS[number];
export const DEFAULT_OUTPUT_FORMAT: OutputFormat = 'mp3_44100_128';

export interface FormatSpec { codec: 'mp3' | 'pcm' | 'ulaw' | 'alaw' | 'opus' | 'wav'; sampleRate: number; kbps: number | null; contentType: string }

const CONTENT_TYPES: Record<FormatSpec['codec'], string> = {
  mp3: 'audio/mpeg', pcm: 'audio/pcm', ulaw: 'audio/basic', alaw: 'audio/x-alaw-basic', opus: 'audio/ogg', wav: 'audio/wav',
};

export function formatSpec(f: OutputFormat): FormatSpec {
  const [codec, rate, kbps] = f.split('_') as [FormatSpec['codec'], string, string | undefined];
  return { codec, sampleRate: Number(rate), kbps: kbps === undefined ? null : Number(kbps), contentType: CONTENT_TYPES[codec] };
}

function queryError(field: string, msg: string): GatewayError {
  return new GatewayError({ code: 'validation_error', param: field, message: msg, detail: [{ loc: ['query', field], msg, type: 'enum' }] });
}

/** The query of a synthesis or conversion route: `output_format` checked against the enumeration. */
export function outputFormatOf(query: string): OutputFormat {
  const q = new URLSearchParams(query);
  const latency = q.get('optimize_streaming_latency');
  if (latency !== null && latency !== '' && !/^[0-4]$/.test(latency)) throw queryError('optimize_streaming_latency', 'optimize_streaming_latency must be an integer from 0 to 4.');
  // Both are accepted and change nothing here (README): no latency mode trades quality away, and no history of text or audio is kept.
  const logging = q.get('enable_logging');
  if (logging !== null && logging !== '' && logging !== 'true' && logging !== 'false') throw queryError('enable_logging', 'enable_logging must be true or false.');
  const f = q.get('output_format');
  if (f === null || f === '') return DEFAULT_OUTPUT_FORMAT;
  if (!(OUTPUT_FORMATS as readonly string[]).includes(f)) {
    throw queryError('output_format', `output_format must be one of ${OUTPUT_FORMATS.join(', ')}; got "${f.slice(0, 64)}".`);
  }
  return f as OutputFormat;
}

const Nullable = <T extends ReturnType<typeof Type.Number>>(t: T) => Type.Optional(Type.Union([t, Type.Null()]));

export const VoiceSettings = Type.Object({
  stability: Nullable(Type.Number({ minimum: 0, maximum: 1 })),
  similarity_boost: Nullable(Type.Number({ minimum: 0, maximum: 1 })),
  style: Nullable(Type.Number({ minimum: 0, maximum: 1 })),
  use_speaker_boost: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  speed: Nullable(Type.Number({ minimum: 0.7, maximum: 1.2 })),
}, { additionalProperties: true });

export const TtsRequest = Type.Object({
  text: Type.String({ minLength: 1, expected: 'the text to speak (a non-empty string)' }),
  model_id: Type.Optional(Type.Union([Type.String({ minLength: 1 }), Type.Null()])),
  language_code: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  voice_settings: Type.Optional(Type.Union([VoiceSettings, Type.Null()])),
  pronunciation_dictionary_locators: Type.Optional(Type.Union([Type.Array(Type.Object({
    pronunciation_dictionary_id: Type.String(), version_id: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  }, { additionalProperties: true }), { maxItems: 3 }), Type.Null()])),
  seed: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 4_294_967_295 }), Type.Null()])),
  previous_text: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  next_text: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  previous_request_ids: Type.Optional(Type.Union([Type.Array(Type.String(), { maxItems: 3 }), Type.Null()])),
  next_request_ids: Type.Optional(Type.Union([Type.Array(Type.String(), { maxItems: 3 }), Type.Null()])),
  use_pvc_as_ivc: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  apply_text_normalization: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('on'), Type.Literal('off'), Type.Null()])),
  apply_language_text_normalization: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
}, { additionalProperties: true });

export const checkTts = compile(TtsRequest);

// What a transcription upstream can do (config `upstreams.<name>.transcription`), and how sim acts like one that can do less.
import { Type, type Static } from '@sinclair/typebox';

/** The response formats of OpenAI's transcription and translation routes. */
export const TRANSCRIPT_FORMATS = ['json', 'text', 'srt', 'verbose_json', 'vtt'] as const;
export type TranscriptFormat = typeof TRANSCRIPT_FORMATS[number];

const Format = Type.Union(TRANSCRIPT_FORMATS.map((f) => Type.Literal(f)));

/**
 * The beta family's speech-to-text parameters an upstream may honour (the official clients'
 * `speech_to_text.convert` list, elevenlabs 2.78): those that change only the transcript's text. Listed
 * in `stt_params`, they are sent on as form fields of the same name; else one that asks for something is refused.
 */
export const STT_PARAMS = ['tag_audio_events', 'keyterms', 'no_verbatim', 'numbers_format', 'seed', 'secondary_language_codes', 'entity_redaction', 'entity_redaction_mode'] as const;
export type SttParam = typeof STT_PARAMS[number];
const FieldName = Type.String({ pattern: '^[A-Za-z0-9_.\\[\\]-]{1,64}$' });

/**
 * An upstream's `/v1/audio/transcriptions` and `/translations` (docs/upstreams.md): the form field it reads
 * the model from, the response formats it answers, and whether it streams. Defaults: OpenAI's.
 */
export const TranscriptionUpstream = Type.Object({
  model_field: Type.String({ ...FieldName, default: 'model', description: 'the form field the upstream reads the model from (faster-whisper-server: model_name)' }),
  response_formats: Type.Array(Format, {
    minItems: 1, uniqueItems: true, default: [...TRANSCRIPT_FORMATS],
    description: 'the response_format values the upstream answers; the others are made by Tollgate from verbose_json',
  }),
  stream: Type.Boolean({ default: true, description: 'the upstream streams transcript.text.delta events for stream=true; if not, Tollgate makes them from the whole reply' }),
  stt_params: Type.Array(Type.Union(STT_PARAMS.map((p) => Type.Literal(p))), {
    uniqueItems: true, default: [],
    description: 'the beta speech-to-text parameters the upstream honours, sent on as form fields of the same name; the others are refused when they ask for something',
  }),
}, { additionalProperties: false, default: {} });

/** sim's transcriber acting like an upstream with less (test infrastructure): the field, the formats, no streaming, no word times. */
export const SimTranscription = Type.Object({
  model_field: Type.Optional(FieldName),
  response_formats: Type.Optional(Type.Array(Format, { minItems: 1, uniqueItems: true })),
  stream: Type.Optional(Type.Boolean()),
  words: Type.Optional(Type.Boolean({ description: 'false: verbose_json has segments only, as faster-whisper-server 0.0.3 answers' })),
}, { additionalProperties: false });

export interface TranscriptionCaps {
  modelField: string;
  formats: readonly TranscriptFormat[];
  stream: boolean;
  /** The beta speech-to-text parameters it honours (sent on). */
  sttParams: readonly SttParam[];
}

export interface SimTranscriptionOptions {
  modelField?: string;
  formats?: readonly TranscriptFormat[];
  stream?: boolean;
  words?: boolean;
}

export function transcriptionCaps(raw: Static<typeof TranscriptionUpstream>): TranscriptionCaps {
  return { modelField: raw.model_field, formats: raw.response_formats, stream: raw.stream, sttParams: raw.stt_params };
}

export function simTranscription(raw: Static<typeof SimTranscription> | undefined): SimTranscriptionOptions | undefined {
  if (!raw) return undefined;
  return { modelField: raw.model_field, formats: raw.response_formats, stream: raw.stream, words: raw.words };
}

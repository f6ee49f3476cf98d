// The family's speech parameters beyond text, voice and format: each is sent on to a model whose upstream honours it (`speech_params`), refused otherwise, or — where it cannot change the audio — accepted as a documented no-op.
import type { ModelConfig, SpeechParam } from '../../config.js';
import { SPEECH_PARAMS } from '../../config.js';
import { GatewayError } from '../../errors.js';
import { compile } from '../validate.js';
import { VoiceSettings } from './schemas.js';

/**
 * What ElevenLabs documents as a premade voice's settings (AsyncAPI RealtimeVoiceSettings defaults,
 * docs/elevenlabs.md, stream-input): a setting at its default asks for nothing, so any model takes it. `speed` is OpenAI's
 * own `speed`, sent on to every model.
 */
export const VOICE_SETTING_DEFAULTS = { stability: 0.5, similarity_boost: 0.75, style: 0, use_speaker_boost: true } as const;
type VoiceSetting = keyof typeof VOICE_SETTING_DEFAULTS;
const VOICE_SETTINGS = Object.keys(VOICE_SETTING_DEFAULTS) as VoiceSetting[];
const checkVoiceSettings = compile(VoiceSettings);

type Loc = 'body' | 'query';

/** The values of the parameters as a request gives them (absent: undefined or null). */
export type SpeechParamValues = Partial<Record<SpeechParam, unknown>>;

/**
 * Whether a value asks for something: absent, empty and the family's defaults that mean "as the model
 * does anyway" (`apply_text_normalization: "auto"`, `apply_language_text_normalization: false`) ask
 * for nothing, so any model takes them.
 */
function asks(name: SpeechParam, v: unknown): boolean {
  if (v === undefined || v === null || v === '') return false;
  if (Array.isArray(v)) return v.length > 0;
  if (name === 'apply_text_normalization') return v !== 'auto';
  if (name === 'apply_language_text_normalization' || name === 'enable_ssml_parsing') return v !== false;
  return true;
}

/**
 * The settings of a `voice_settings` object (its `speed` apart) that ask for something: not null, not
 * absent, not the premade default; a setting the family does not document (e.g. the Python client's
 * `clone_strength`) asks for something whatever its value, since nothing here knows what it would change.
 */
function askedSettings(v: unknown): string[] {
  if (!v || typeof v !== 'object') return [];
  const asks = (k: string, x: unknown): boolean => {
    if (x === undefined || x === null) return false;
    return !(VOICE_SETTINGS as string[]).includes(k) || x !== VOICE_SETTING_DEFAULTS[k as VoiceSetting];
  };
  return Object.entries(v as Record<string, unknown>).filter(([k, x]) => asks(k, x)).map(([k]) => k);
}

function unsupported(model: ModelConfig, models: readonly ModelConfig[], name: SpeechParam, loc: string[], shown: string): GatewayError {
  const takers = models.filter((m) => m.kind === model.kind && m.speechParams.includes(name)).map((m) => m.id);
  const msg = `${shown} is not supported by model ${model.id} (its upstream does not take it, and dropping it would change the audio); `
    + (takers.length ? `models that take it: ${takers.join(', ')}.` : 'no model of this gateway takes it.');
  return new GatewayError({ status: 422, code: 'unsupported_parameter', param: shown, message: msg,
    detail: [{ loc, msg, type: 'unsupported_parameter' }] });
}

/**
 * A `voice_settings` object where the JSON body's schema did not check it (a socket frame, a form
 * field): an object (or null) whose settings are numbers and a boolean in the family's ranges.
 */
export function checkedVoiceSettings(v: unknown, loc: string[]): unknown {
  if (v === undefined || v === null || checkVoiceSettings.Check(v)) return v ?? undefined;
  const first = [...checkVoiceSettings.Errors(v)][0];
  const path = first ? first.path.split('/').filter(Boolean) : [];
  const msg = `voice_settings${path.length ? `.${path.join('.')}` : ''} is invalid: ${first?.message ?? 'expected an object'} (stability, similarity_boost and style from 0 to 1, use_speaker_boost a boolean, speed from 0.7 to 1.2).`;
  throw new GatewayError({ code: 'validation_error', param: ['voice_settings', ...path].join('.'), message: msg,
    detail: [{ loc: [...loc, 'voice_settings', ...path], msg, type: 'value_error' }] });
}

/**
 * A request's `voice_settings`: for speech, `speed` becomes OpenAI's `speed` and the rest is sent on
 * whole as `voice_settings` to a model that lists it; for conversion (`whole`), the object with its
 * speed. Without the listing, each setting that asks for something is refused (422 on
 * [...loc, "voice_settings", setting]).
 */
function voiceFields(models: readonly ModelConfig[], model: ModelConfig, v: unknown, loc: string[], out: Record<string, unknown>, whole = false): void {
  if (!v || typeof v !== 'object') return;
  const { speed, ...rest } = v as Record<string, unknown>;
  const sent = whole ? { ...rest, speed } : rest;
  if (!whole && typeof speed === 'number') out.speed = speed;
  if (model.speechParams.includes('voice_settings')) {
    if (Object.values(sent).some((x) => x !== undefined && x !== null)) out.voice_settings = sent;
    return;
  }
  const asked: string | undefined = askedSettings(rest)[0] ?? (whole && speed !== undefined && speed !== null && speed !== 1 ? 'speed' : undefined);
  if (asked) throw unsupported(model, models, 'voice_settings', [...loc, 'voice_settings', asked], `voice_settings.${asked}`);
}

/**
 * The fields to add to the upstream's `/v1/audio/speech` body: every parameter the request gives that
 * the model's upstream honours. A parameter that asks for something the model's upstream does not
 * honour is refused with 422 naming it and the models that take it: dropping it would change the audio.
 */
export function speechParams(models: readonly ModelConfig[], model: ModelConfig, values: SpeechParamValues, loc: Loc = 'body'): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of SPEECH_PARAMS) {
    const v = values[name];
    if (name === 'voice_settings') { voiceFields(models, model, v, [loc], out); continue; }
    if (model.speechParams.includes(name)) {
      if (v !== undefined && v !== null) out[name] = v;
      continue;
    }
    if (!asks(name, v)) continue;
    throw unsupported(model, models, name, [loc, name], name);
  }
  return out;
}

/**
 * A socket's or a form's `voice_settings` (unchecked JSON): checked, then as `speechParams` — the
 * fields it adds to the upstream's body (`speed`, and `voice_settings` for a model that lists it);
 * `whole` for the conversion contract, which takes the object with its speed.
 */
export function voiceSettingsParams(models: readonly ModelConfig[], model: ModelConfig, v: unknown, loc: string[] = ['body'], whole = false): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  voiceFields(models, model, checkedVoiceSettings(v, loc), loc, out, whole);
  return out;
}

function queryInvalid(name: string, msg: string): GatewayError {
  return new GatewayError({ code: 'validation_error', param: name, message: msg, detail: [{ loc: ['query', name], msg, type: 'value_error' }] });
}

/** The stream-input socket's query (`seed`, `language_code`, `apply_text_normalization`, `enable_ssml_parsing`): checked, then as `speechParams`. */
export function queryParams(models: readonly ModelConfig[], model: ModelConfig, query: Readonly<Record<string, string>>): Record<string, unknown> {
  const seedText = query.seed;
  let seed: number | undefined;
  if (seedText !== undefined && seedText !== '') {
    seed = Number(seedText);
    if (!/^\d+$/.test(seedText) || seed > 4_294_967_295) throw queryInvalid('seed', 'seed must be an integer from 0 to 4294967295.');
  }
  const norm = query.apply_text_normalization;
  if (norm !== undefined && norm !== '' && !['auto', 'on', 'off'].includes(norm)) throw queryInvalid('apply_text_normalization', 'apply_text_normalization must be auto, on or off.');
  const ssml = query.enable_ssml_parsing;
  if (ssml !== undefined && ssml !== '' && ssml !== 'true' && ssml !== 'false') throw queryInvalid('enable_ssml_parsing', 'enable_ssml_parsing must be true or false.');
  return speechParams(models, model, { seed, language_code: query.language_code, apply_text_normalization: norm || undefined,
    enable_ssml_parsing: ssml ? ssml === 'true' : undefined }, 'query');
}

// The family's speech parameters beyond text, voice and format: each is sent on to a model whose upstream honours it (`speech_params`), refused otherwise, or — where it cannot change the audio — accepted as a documented no-op.
import type { ModelConfig, SpeechParam } from '../../config.js';
import { SPEECH_PARAMS } from '../../config.js';
import { GatewayError } from '../../errors.js';

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
  if (name === 'apply_language_text_normalization') return v !== false;
  return true;
}

/**
 * The fields to add to the upstream's `/v1/audio/speech` body: every parameter the request gives that
 * the model's upstream honours. A parameter that asks for something the model's upstream does not
 * honour is refused with 422 naming it and the models that take it: dropping it would change the audio.
 */
export function speechParams(models: readonly ModelConfig[], model: ModelConfig, values: SpeechParamValues, loc: 'body' | 'query' = 'body'): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of SPEECH_PARAMS) {
    const v = values[name];
    if (model.speechParams.includes(name)) {
      if (v !== undefined && v !== null) out[name] = v;
      continue;
    }
    if (!asks(name, v)) continue;
    const takers = models.filter((m) => m.kind === 'tts' && m.speechParams.includes(name)).map((m) => m.id);
    const msg = `${name} is not supported by model ${model.id} (its upstream does not take it, and dropping it would change the audio); `
      + (takers.length ? `models that take it: ${takers.join(', ')}.` : 'no model of this gateway takes it.');
    throw new GatewayError({ status: 422, code: 'unsupported_parameter', param: name, message: msg,
      detail: [{ loc: [loc, name], msg, type: 'unsupported_parameter' }] });
  }
  return out;
}


function queryInvalid(name: string, msg: string): GatewayError {
  return new GatewayError({ status: 422, code: 'validation_error', param: name, message: msg, detail: [{ loc: ['query', name], msg, type: 'value_error' }] });
}

/** The stream-input socket's query (`seed`, `language_code`, `apply_text_normalization`): checked, then as `speechParams`. */
export function queryParams(models: readonly ModelConfig[], model: ModelConfig, query: Readonly<Record<string, string>>): Record<string, unknown> {
  const seedText = query.seed;
  let seed: number | undefined;
  if (seedText !== undefined && seedText !== '') {
    seed = Number(seedText);
    if (!/^\d+$/.test(seedText) || seed > 4_294_967_295) throw queryInvalid('seed', 'seed must be an integer from 0 to 4294967295.');
  }
  const norm = query.apply_text_normalization;
  if (norm !== undefined && norm !== '' && !['auto', 'on', 'off'].includes(norm)) throw queryInvalid('apply_text_normalization', 'apply_text_normalization must be auto, on or off.');
  return speechParams(models, model, { seed, language_code: query.language_code, apply_text_normalization: norm || undefined }, 'query');
}

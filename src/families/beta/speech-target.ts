// Which model and upstream voice a beta voice id synthesizes with: the caller's cloned voice (its clone model), or a preset voice.
import type { Services } from '../../services.js';
import type { ModelConfig } from '../../config.js';
import { GatewayError } from '../../errors.js';
import { voiceOf, type VoiceRecord } from '../../store/voices.js';
import { clonedPlaces, presetPlaces, type VoicePlaces } from '../../resolve/voices.js';

export interface SpeechTarget {
  model: ModelConfig;
  /** The voice's name at the model's first upstream that knows it. */
  upstreamVoice: string;
  /** The upstreams of the model's pool that speak the voice, and its name on each (a cloned voice has an id per upstream). */
  places: VoicePlaces;
  cloned: boolean;
}

/** The TTS model a request's `model_id` names (the family's ids are aliases in the config); the family's default when absent. */
export const DEFAULT_TTS_MODEL_ID = 'eleven_multilingual_v2';

/** `model_id` as given; absent, the family's default id if the config names it, else the first TTS model that does not clone. */
function presetModel(s: Services, modelId: string | null | undefined): ModelConfig {
  if (modelId) return s.models.resolve(modelId, 'tts');
  const named = s.models.find(DEFAULT_TTS_MODEL_ID);
  const model = named?.kind === 'tts' ? named : s.models.models.find((m) => m.kind === 'tts' && !m.voiceCloning);
  return model ?? s.models.resolve(DEFAULT_TTS_MODEL_ID, 'tts');
}

export function voiceNotFound(id: string): GatewayError {
  return new GatewayError({ code: 'voice_not_found', type: 'not_found', param: 'voice_id', message: `A voice with voice_id '${id}' was not found.` });
}

/**
 * A cloned voice of the caller's account synthesizes with the model that cloned it, whatever
 * `model_id` says (no other model knows the voice); another account's voice is not found. A preset
 * voice synthesizes with the TTS model `model_id` resolves to.
 */
export async function speechTarget(s: Services, accountId: string, voiceId: string, modelId: string | null | undefined,
  preset: (voiceId: string) => string | null): Promise<SpeechTarget> {
  const upstream = preset(voiceId);
  if (upstream !== null) {
    const model = presetModel(s, modelId);
    return { model, upstreamVoice: upstream, places: presetPlaces(model, upstream), cloned: false };
  }
  const v = await voiceOf(s.db, accountId, voiceId);
  if (!v) throw voiceNotFound(voiceId);
  const model = s.models.resolve(v.modelId, 'tts');
  const places = placesOf(model, v);
  return { model, upstreamVoice: places.voiceAt(places.pool[0]!.name), places, cloned: true };
}

/** Where the cloned voice `v` is spoken with `model`: the upstreams of its pool that hold a copy; none (the pool changed since), refused. */
export function placesOf(model: ModelConfig, v: VoiceRecord): VoicePlaces {
  const places = clonedPlaces(model, v.copies);
  if (!places) {
    throw new GatewayError({ status: 400, code: 'invalid_value', param: 'voice_id',
      message: `The voice '${v.id}' was cloned on other hosts than those of ${model.id}, so it cannot be spoken with it.` });
  }
  return places;
}

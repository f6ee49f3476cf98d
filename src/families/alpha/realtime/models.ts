// The models behind a realtime session: the session's chat (or realtime) model, the transcription and speech models of the cascade, and the prices its units are billed at.
import type { Services } from '../../../services.js';
import type { ModelConfig } from '../../../config.js';
import type { ChargeSpec } from '../../../exchange/charge.js';

/** A session's unit prices, as its charge holds them. */
type UnitPrices = ChargeSpec['model']['prices'];

/**
 * A chat model, or a `realtime` model: its text turns go to its upstream's chat completions as its
 * `upstream_model` (a chat model there), priced at its own token prices.
 */
export function chatOrRealtime(s: Services, name: string): ModelConfig {
  return s.models.resolve(name, ['chat', 'realtime']);
}

/** The models a session's audio goes through (config `realtime`), where configured. */
export interface AudioModels { stt: ModelConfig | undefined; tts: ModelConfig | undefined }

export function audioModels(s: Services): AudioModels {
  const { transcriptionModel, speechModel } = s.config.realtime;
  return { stt: transcriptionModel ? s.models.find(transcriptionModel) : undefined, tts: speechModel ? s.models.find(speechModel) : undefined };
}

/**
 * One price list for a session's units: tokens at the session model's prices; committed input audio
 * at a realtime model's own audio price, else at the transcription model's; synthesized characters
 * at the session model's per_mchar if it has one, else at the speech model's; audio out at the
 * session model's audio_out price (zero unless a realtime model sets one).
 */
export function sessionPrices(model: ModelConfig, audio: AudioModels): UnitPrices {
  const p = model.prices;
  return {
    ...p,
    audioInPerMinute: model.kind === 'realtime' ? p.audioInPerMinute : (audio.stt?.prices.audioInPerMinute ?? 0n),
    perMChar: p.perMChar > 0n ? p.perMChar : (audio.tts?.prices.perMChar ?? 0n),
  };
}

/** What a session.update may ask for, given the models configured. */
export interface AudioCaps { audioOut: boolean; transcription: ((name: string) => boolean) | null }

export function audioCaps(s: Services, audio: AudioModels): AudioCaps {
  return {
    audioOut: audio.tts !== undefined,
    // A transcription model named by the client must be the one this gateway transcribes with (an alias of it).
    transcription: audio.stt ? (name) => s.models.find(name)?.id === audio.stt!.id : null,
  };
}

// The client events a realtime pass-through refuses (what would change billing unseen) and the model-name rewrite of session events.
import type { ModelConfig } from '../../../config.js';

export type Obj = Record<string, unknown>;

export interface Refusal { code: string; param: string | null; message: string }

/**
 * A client event the pass-through will not pass on, or null. Refused: another model (the upstream
 * would bill at its prices, not this model's); a transcription session, or input transcription turned
 * on (the upstream bills transcription apart from `response.done`, which is all that is metered);
 * the legacy `transcription_session.update`.
 */
export function checkClientEvent(m: Obj, model: Pick<ModelConfig, 'id'>, isThisModel: (name: string) => boolean): Refusal | null {
  switch (m.type) {
    case 'transcription_session.update':
      return { code: 'unsupported_event', param: 'type', message: 'Transcription sessions are not available through this gateway\'s realtime pass-through.' };
    case 'session.update': {
      const s = m.session;
      if (!s || typeof s !== 'object' || Array.isArray(s)) return { code: 'invalid_value', param: 'session', message: '`session` must be an object.' };
      const session = s as Obj;
      if (session.type !== undefined && session.type !== 'realtime') {
        return { code: 'unsupported_parameter', param: 'session.type', message: 'Only "realtime" sessions are available through this gateway.' };
      }
      if (session.model !== undefined && (typeof session.model !== 'string' || !isThisModel(session.model))) {
        return { code: 'invalid_value', param: 'session.model', message: `The model of a session cannot be changed; this session is ${model.id}.` };
      }
      const input = ((session.audio as Obj | undefined)?.input ?? {}) as Obj;
      if (input.transcription !== undefined && input.transcription !== null) {
        return { code: 'unsupported_parameter', param: 'session.audio.input.transcription', message: 'Input audio transcription is billed apart from the response and is not available through this gateway; set it to null.' };
      }
      if (session.input_audio_transcription !== undefined && session.input_audio_transcription !== null) {
        return { code: 'unsupported_parameter', param: 'session.input_audio_transcription', message: 'Input audio transcription is billed apart from the response and is not available through this gateway; set it to null.' };
      }
      return null;
    }
    case 'response.create': {
      const r = m.response;
      if (r !== undefined && (!r || typeof r !== 'object' || Array.isArray(r))) return { code: 'invalid_value', param: 'response', message: '`response` must be an object.' };
      if (r && (r as Obj).model !== undefined) return { code: 'unknown_parameter', param: 'response.model', message: 'A response runs on the session\'s model; `response.model` is not a parameter.' };
      return null;
    }
    default:
      return null;
  }
}

/** A session event names the upstream's model: clients see this gateway's id. True when it was changed. */
export function rewriteSessionModel(session: Obj, model: Pick<ModelConfig, 'id'>): boolean {
  if (typeof session.model !== 'string' || session.model === model.id) return false;
  session.model = model.id;
  return true;
}

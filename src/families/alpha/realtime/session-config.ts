// A realtime session's configuration: the one it starts with, and `session.update` applied to it (GA shape, the beta's flat fields mapped onto it), each field checked.
import type { ModelConfig } from '../../../config.js';
import { OPENAI_VOICES } from '../../../resolve/voices.js';
import type { AudioCaps } from './models.js';
import { RtError, type Obj } from './protocol.js';

/** What a session's checks need of its model. */
export type Limits = Pick<ModelConfig, 'id' | 'maxOutputTokens'>;

/**
 * The GA session a new socket starts with, as OpenAI's does: audio out (the reply spoken, with its
 * transcript) where a speech model is configured, else text; PCM 24 kHz formats; server VAD on.
 */
export function defaultSession(id: string, model: string, audioOut: boolean): Obj {
  return {
    type: 'realtime', object: 'realtime.session', id, model, output_modalities: [audioOut ? 'audio' : 'text'], instructions: '',
    audio: {
      input: { format: { type: 'audio/pcm', rate: 24000 }, transcription: null, noise_reduction: null,
        turn_detection: { type: 'server_vad', threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, create_response: true, interrupt_response: true, idle_timeout_ms: null } },
      output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'alloy', speed: 1 },
    },
    tools: [], tool_choice: 'auto', max_output_tokens: 'inf', tracing: null, truncation: 'auto', prompt: null, include: null,
    expires_at: 0,
  };
}

const BAD_G711 = new Set(['audio/pcmu', 'audio/pcma', 'pcmu', 'pcma', 'g711_ulaw', 'g711_alaw']);

export function checkFormat(f: unknown, param: string): Obj {
  const type = typeof f === 'string' ? f : (f as Obj | null)?.type;
  if (typeof type !== 'string') throw new RtError('invalid_value', param, `${param} must be {"type": "audio/pcm", "rate": 24000}.`);
  if (BAD_G711.has(type)) throw new RtError('unsupported_parameter', param, `${param} ${type} (G.711) is not available here; use audio/pcm at 24000 Hz.`);
  if (type !== 'audio/pcm' && type !== 'pcm16') throw new RtError('invalid_value', param, `${param} "${type.slice(0, 40)}" is not a realtime audio format; use audio/pcm at 24000 Hz.`);
  const rate = typeof f === 'object' && f !== null ? (f as Obj).rate : undefined;
  if (rate !== undefined && rate !== 24000) throw new RtError('invalid_value', `${param}.rate`, 'audio/pcm is 24000 Hz only.');
  return { type: 'audio/pcm', rate: 24000 };
}

export function checkTurnDetection(t: unknown, param: string): Obj | null {
  if (t === null) return null;
  const type = (t as Obj | undefined)?.type;
  if (type !== 'server_vad') {
    throw new RtError(type === 'semantic_vad' ? 'unsupported_parameter' : 'invalid_value', `${param}.type`,
      `${param}.type must be "server_vad" or the whole field null; ${typeof type === 'string' ? `"${type.slice(0, 40)}" is not available here` : 'it is missing'}.`);
  }
  return { type: 'server_vad', threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, create_response: true, interrupt_response: true, idle_timeout_ms: null, ...(t as Obj) };
}

/**
 * Applies a `session.update` to a copy of the session (GA shape; the beta's flat fields mapped onto
 * it): the copy, or an RtError naming the field, the session untouched.
 */
export function updatedSession(current: Obj, update: Obj, model: Limits, caps: AudioCaps = { audioOut: false, transcription: null }): Obj {
  const next = structuredClone(current) as Obj & { audio: { input: Obj; output: Obj } };
  const u = { ...update };
  if (u.type !== undefined && u.type !== 'realtime') throw new RtError('unsupported_parameter', 'session.type', `session.type "${String(u.type).slice(0, 40)}" is not available here; only "realtime".`);
  if (u.model !== undefined && u.model !== current.model && u.model !== model.id) throw new RtError('invalid_value', 'session.model', 'The model of a session cannot be changed.');
  // The beta's flat fields.
  if (u.modalities !== undefined) u.output_modalities = u.modalities;
  if (u.max_response_output_tokens !== undefined) u.max_output_tokens = u.max_response_output_tokens;
  const audio = (u.audio ?? {}) as { input?: Obj; output?: Obj };
  const input = { ...(audio.input ?? {}) };
  const output = { ...(audio.output ?? {}) };
  if (u.input_audio_format !== undefined) input.format = u.input_audio_format;
  if (u.output_audio_format !== undefined) output.format = u.output_audio_format;
  if (u.turn_detection !== undefined) input.turn_detection = u.turn_detection;
  if (u.input_audio_transcription !== undefined) input.transcription = u.input_audio_transcription;
  if (u.voice !== undefined) output.voice = u.voice;
  if (u.speed !== undefined) output.speed = u.speed;
  if (u.input_audio_noise_reduction !== undefined) input.noise_reduction = u.input_audio_noise_reduction;
  const beta = u.input_audio_format !== undefined || u.output_audio_format !== undefined;
  if (input.format !== undefined) next.audio.input.format = checkFormat(input.format, beta && u.input_audio_format !== undefined ? 'session.input_audio_format' : 'session.audio.input.format');
  if (output.format !== undefined) next.audio.output.format = checkFormat(output.format, beta && u.output_audio_format !== undefined ? 'session.output_audio_format' : 'session.audio.output.format');
  if (input.turn_detection !== undefined) next.audio.input.turn_detection = checkTurnDetection(input.turn_detection, u.turn_detection !== undefined ? 'session.turn_detection' : 'session.audio.input.turn_detection');
  if (input.transcription !== undefined) next.audio.input.transcription = checkTranscription(input.transcription, u.input_audio_transcription !== undefined ? 'session.input_audio_transcription' : 'session.audio.input.transcription', caps);
  if (input.noise_reduction !== undefined && input.noise_reduction !== null) {
    // Noise reduction would change what is heard: refused rather than ignored.
    throw new RtError('unsupported_parameter', u.input_audio_noise_reduction !== undefined ? 'session.input_audio_noise_reduction' : 'session.audio.input.noise_reduction', 'Input noise reduction is not available here; set it to null.');
  }
  if (output.voice !== undefined) {
    if (typeof output.voice !== 'string' || !OPENAI_VOICES.includes(output.voice)) {
      throw new RtError('invalid_value', u.voice !== undefined ? 'session.voice' : 'session.audio.output.voice', `voice must be one of ${OPENAI_VOICES.join(', ')}.`);
    }
    next.audio.output.voice = output.voice;
  }
  if (output.speed !== undefined) {
    if (typeof output.speed !== 'number' || !(output.speed >= 0.25 && output.speed <= 4)) throw new RtError('invalid_value', u.speed !== undefined ? 'session.speed' : 'session.audio.output.speed', 'speed must be a number from 0.25 to 4.');
    next.audio.output.speed = output.speed;
  }
  if (u.output_modalities !== undefined) next.output_modalities = checkModalities(u.output_modalities, 'session.output_modalities', caps);
  if (u.instructions !== undefined) {
    if (typeof u.instructions !== 'string') throw new RtError('invalid_value', 'session.instructions', 'instructions must be a string.');
    next.instructions = u.instructions;
  }
  if (u.max_output_tokens !== undefined) next.max_output_tokens = checkMaxOutput(u.max_output_tokens, 'session.max_output_tokens', model);
  if (u.tools !== undefined) { if (!Array.isArray(u.tools)) throw new RtError('invalid_value', 'session.tools', 'tools must be a list.'); next.tools = u.tools; }
  if (u.tool_choice !== undefined) next.tool_choice = u.tool_choice;
  // Everything else is kept and echoed (temperature, tracing, truncation, prompt, include...).
  const handled = new Set(['type', 'model', 'modalities', 'max_response_output_tokens', 'audio', 'input_audio_format', 'output_audio_format', 'turn_detection',
    'input_audio_transcription', 'voice', 'speed', 'input_audio_noise_reduction', 'output_modalities', 'instructions', 'max_output_tokens', 'tools', 'tool_choice']);
  for (const [k, v] of Object.entries(u)) if (!handled.has(k) && v !== undefined && k !== 'id' && k !== 'object') next[k] = v;
  return next;
}

/**
 * A session in the beta's flat shape (`modalities`, `input_audio_format`, `voice`...), as OpenAI's
 * beta-era `POST /v1/realtime/sessions` answered (its RealtimeSessionCreateResponse): audio output
 * was `["audio", "text"]` there, PCM was `pcm16`.
 */
export function betaSessionView(session: Obj): Obj {
  const audio = session.audio as { input: Obj; output: Obj };
  const pcm = (f: unknown): string => ((f as Obj | null)?.type === 'audio/pcm' ? 'pcm16' : String((f as Obj | null)?.type));
  const { type: _type, output_modalities: modalities, audio: _audio, max_output_tokens: maxOutput, truncation: _t, prompt: _p, include: _i, ...rest } = session;
  return {
    ...rest,
    object: 'realtime.session',
    modalities: (modalities as string[]).includes('audio') ? ['audio', 'text'] : ['text'],
    voice: audio.output.voice,
    speed: audio.output.speed,
    input_audio_format: pcm(audio.input.format),
    output_audio_format: pcm(audio.output.format),
    input_audio_transcription: audio.input.transcription,
    input_audio_noise_reduction: audio.input.noise_reduction,
    turn_detection: audio.input.turn_detection,
    max_response_output_tokens: maxOutput,
    temperature: session.temperature ?? 0.8,
  };
}

/** ["text"] or ["audio"] (audio carries its transcript); audio only where a speech model is configured. */
export function checkModalities(m: unknown, param: string, caps: AudioCaps): string[] {
  if (!Array.isArray(m) || m.length === 0 || m.some((x) => x !== 'text' && x !== 'audio')) throw new RtError('invalid_value', param, 'output_modalities must be ["text"] or ["audio"].');
  if (!m.includes('audio')) return ['text'];
  if (!caps.audioOut) throw new RtError('unsupported_parameter', param, 'Audio output needs a speech (tts) model, and this gateway has none configured; use ["text"].');
  return ['audio'];
}

export function checkTranscription(t: unknown, param: string, caps: AudioCaps): Obj | null {
  if (t === null) return null;
  if (!t || typeof t !== 'object') throw new RtError('invalid_value', param, `${param} must be an object or null.`);
  const o = t as Obj;
  if (!caps.transcription) throw new RtError('unsupported_parameter', param, 'Input transcription needs a transcription (stt) model, and this gateway has none configured.');
  if (o.model !== undefined && (typeof o.model !== 'string' || !caps.transcription(o.model))) {
    throw new RtError('invalid_value', `${param}.model`, `${String(o.model).slice(0, 60)} is not this gateway's realtime transcription model.`);
  }
  for (const k of ['language', 'prompt'] as const) {
    if (o[k] !== undefined && typeof o[k] !== 'string') throw new RtError('invalid_value', `${param}.${k}`, `${k} must be a string.`);
  }
  return { ...o };
}

export function checkMaxOutput(v: unknown, param: string, model: Limits): number | 'inf' {
  if (v === 'inf') return 'inf';
  if (!Number.isInteger(v) || (v as number) < 1) throw new RtError('invalid_value', param, `${param} must be a whole number of tokens or "inf".`);
  if ((v as number) > model.maxOutputTokens) throw new RtError('invalid_value', param, `${param} is at most ${model.maxOutputTokens} for ${model.id}.`);
  return v as number;
}

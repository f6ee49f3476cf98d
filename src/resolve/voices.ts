// Preset voices both families name: OpenAI's voice names and ElevenLabs' premade voice ids, each mapped to the voice sent upstream.
import type { ModelConfig, PoolEntry } from '../config.js';
import type { VoiceCopy } from '../store/voices.js';

export interface PresetVoice {
  /** What a client sends: an OpenAI voice name (`alloy`) or an ElevenLabs voice id. */
  id: string;
  name: string;
  family: 'alpha' | 'beta';
  category: 'premade';
  /** ElevenLabs' legacy premade voices are listed only with `show_legacy=true`. */
  legacy: boolean;
  /**
   * The voice name the upstream is sent. OpenAI-compatible servers (Kokoro-FastAPI, speaches) take
   * OpenAI's names; each ElevenLabs premade voice is mapped onto one of them, the same one always.
   */
  upstreamVoice: string;
}

/** OpenAI's speech voices (the spec's VoiceIdsShared enumeration). */
export const OPENAI_VOICES: readonly string[] = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar'];

/** ElevenLabs' premade voices (docs/elevenlabs.md, "Premade voices", from ElevenLabs' default voices page): the current defaults, then the legacy ones named there. */
const ELEVENLABS_PREMADE: readonly [name: string, id: string, legacy: boolean][] = [
  ['Alice', 'Xb7hH8MSUJpSbSDYk0k2', false], ['Aria', '9BWtsMINqrJLrRacOk9x', false], ['Bill', 'pqHfZKP75CvOlQylNhV4', false],
  ['Brian', 'nPczCjzI2devNBz1zQrb', false], ['Callum', 'N2lVS1w4EtoT3dr4eOWO', false], ['Charlie', 'IKne3meq5aSn9XLyUdCD', false],
  ['Charlotte', 'XB0fDUnXU5powFXDhCwa', false], ['Chris', 'iP95p4xoKVk53GoZ742B', false], ['Daniel', 'onwK4e9ZLuTAKqWW03F9', false],
  ['Eric', 'cjVigY5qzO86Huf0OWal', false], ['George', 'JBFqnCBsd6RMkjVDRZzb', false], ['Jessica', 'cgSgspJ2msm6clMCkdW9', false],
  ['Laura', 'FGY2WhTYpPnrIDTdsKH5', false], ['Liam', 'TX3LPaxmHKxFdv7VOQHJ', false], ['Lily', 'pFZP5JQG7iQjIQuC4Bku', false],
  ['Matilda', 'XrExE9yKIg1WjnnlVkGX', false], ['River', 'SAz9YHcvj6GT2YYXdXww', false], ['Roger', 'CwhRBWXzGAHq8TQ4Fs17', false],
  ['Sarah', 'EXAVITQu4vr4xnSDxMaL', false], ['Will', 'bIHbv24MWmeRgasZH58o', false],
  ['Rachel', '21m00Tcm4TlvDq8ikWAM', true], ['Adam', 'pNInz6obpgDQGcFmaJgB', true], ['Antoni', 'ErXwobaYiN019PkySvjV', true],
  ['Josh', 'TxGEqnHWrfWFTfGW9XjX', true],
];

export const PRESET_VOICES: readonly PresetVoice[] = [
  ...OPENAI_VOICES.map((v): PresetVoice => ({ id: v, name: v, family: 'alpha', category: 'premade', legacy: false, upstreamVoice: v })),
  ...ELEVENLABS_PREMADE.map(([name, id, legacy], i): PresetVoice => ({
    id, name, family: 'beta', category: 'premade', legacy, upstreamVoice: OPENAI_VOICES[i % OPENAI_VOICES.length]!,
  })),
];

const BY_ID = new Map(PRESET_VOICES.map((v) => [v.id, v]));

/** The preset voice with this id (an ElevenLabs voice id) or name (an OpenAI voice name), if any. */
export function presetVoice(id: string): PresetVoice | undefined {
  return BY_ID.get(id);
}

/** Where a voice is spoken: the upstreams of a model's pool that know it, and its name on each. */
export interface VoicePlaces {
  /** The pool's upstreams to route to (a cloned voice: those it was cloned on). */
  pool: readonly PoolEntry[];
  /** The voice's name on one of them (a cloned voice has its own id on each upstream). */
  voiceAt(upstream: string): string;
}

/** A preset voice: every upstream of the pool, under one name. */
export function presetPlaces(model: ModelConfig, upstreamVoice: string): VoicePlaces {
  return { pool: model.pool, voiceAt: () => upstreamVoice };
}

/** A cloned voice on `model`: the upstreams of its pool that hold a copy (none: null, the voice cannot be spoken there). */
export function clonedPlaces(model: ModelConfig, copies: readonly VoiceCopy[]): VoicePlaces | null {
  const ids = new Map(copies.map((c) => [c.upstream, c.upstreamVoiceId]));
  const pool = model.pool.filter((e) => ids.has(e.name));
  return pool.length === 0 ? null : { pool, voiceAt: (upstream) => ids.get(upstream)! };
}

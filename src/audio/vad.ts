// Server voice activity detection for realtime sessions: a loudness gate over 20 ms frames of 16-bit PCM.
//
// The algorithm (the README's realtime section says the same):
// - Each 20 ms frame gets a speech level from its RMS loudness in dBFS: 0 at -60 dBFS or quieter,
//   1 at -20 dBFS or louder, linear in between. `threshold` (0–1, default 0.5: -40 dBFS) is the
//   level a frame must reach to count as speech.
// - Speech starts at the first of MIN_SPEECH_FRAMES consecutive speech frames; the turn's audio
//   begins `prefix_padding_ms` before it (never before the buffer's start).
// - Speech stops once `silence_duration_ms` of consecutive frames fall below the threshold; the
//   turn's audio ends there (so it includes that silence, as the OpenAI protocol says).
// It is an energy detector, not a model: steady loud noise counts as speech, and whispers under
// -40 dBFS do not (lower the threshold for quiet microphones).

export interface VadParams {
  /** 0–1: the speech level a frame must reach. */
  threshold: number;
  prefixPaddingMs: number;
  silenceDurationMs: number;
}

export type VadEvent =
  | { type: 'start'; /** Sample where speech was first heard. */ at: number }
  | { type: 'stop'; /** Sample after the silence that ended it. */ at: number };

export const VAD_FRAME_MS = 20;
/** Speech must last this many frames (60 ms) to start a turn: a click is not a turn. */
export const MIN_SPEECH_FRAMES = 3;
const FLOOR_DB = -60;
const FULL_DB = -20;

/** A frame's speech level (0–1) from its RMS loudness. */
export function speechLevel(frame: Int16Array): number {
  if (frame.length === 0) return 0;
  let sum = 0;
  for (let i = 0; i < frame.length; i++) sum += frame[i]! * frame[i]!;
  const rms = Math.sqrt(sum / frame.length);
  if (rms === 0) return 0;
  const db = 20 * Math.log10(rms / 32768);
  return Math.min(1, Math.max(0, (db - FLOOR_DB) / (FULL_DB - FLOOR_DB)));
}

/** Feeds samples in any chunking; reports starts and stops at sample positions counted from the first sample pushed. */
export class Vad {
  private readonly frame: number;
  private readonly pending: Int16Array;
  private filled = 0;
  /** Samples consumed into whole frames so far. */
  private pos = 0;
  private speaking = false;
  private run = 0;
  private runStart = 0;
  private silentMs = 0;

  constructor(private readonly params: VadParams, sampleRate: number) {
    this.frame = Math.round((sampleRate * VAD_FRAME_MS) / 1000);
    this.pending = new Int16Array(this.frame);
  }

  get isSpeaking(): boolean { return this.speaking; }

  push(samples: Int16Array): VadEvent[] {
    const events: VadEvent[] = [];
    let i = 0;
    while (i < samples.length) {
      const take = Math.min(this.frame - this.filled, samples.length - i);
      this.pending.set(samples.subarray(i, i + take), this.filled);
      this.filled += take;
      i += take;
      if (this.filled < this.frame) break;
      this.filled = 0;
      const start = this.pos;
      this.pos += this.frame;
      const loud = speechLevel(this.pending) >= this.params.threshold;
      if (!this.speaking) {
        if (!loud) { this.run = 0; continue; }
        if (this.run === 0) this.runStart = start;
        if (++this.run >= MIN_SPEECH_FRAMES) {
          this.speaking = true;
          this.silentMs = 0;
          events.push({ type: 'start', at: this.runStart });
        }
      } else if (loud) {
        this.silentMs = 0;
      } else if ((this.silentMs += VAD_FRAME_MS) >= this.params.silenceDurationMs) {
        this.speaking = false;
        this.run = 0;
        events.push({ type: 'stop', at: this.pos });
      }
    }
    return events;
  }
}

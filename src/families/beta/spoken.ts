// Meters one stream-input generation as it is spoken: each piece of audio goes out as a frame with the characters it covers, and a cut generation bills the characters sent.
import type { Meter } from '../../exchange/meter.js';
import { usage, type Usage } from '../../exchange/usage.js';
import type { AudioEncoder } from '../../meter/synthesis.js';

/** Each character's start and length in ms within one frame's audio (the upstream times none). */
export interface WsAlignment { chars: string[]; charStartTimesMs: number[]; charsDurationsMs: number[] }

export function align(chars: readonly string[], durationMs: number): WsAlignment {
  const per = chars.length ? durationMs / chars.length : 0;
  return {
    chars: [...chars],
    charStartTimesMs: chars.map((_, i) => Math.round(i * per)),
    charsDurationsMs: chars.map((_, i) => Math.round((i + 1) * per) - Math.round(i * per)),
  };
}

/**
 * A session's speaking pace: the audio its finished generations lasted over their characters. Until
 * one has finished, 15 characters a second is assumed (about 150 words a minute, a common narration
 * pace); from then on the voice's own measured pace is used.
 */
export class Pace {
  private ms = 0;
  private chars = 0;
  static readonly DEFAULT_MS_PER_CHAR = 1000 / 15;
  get msPerChar(): number { return this.chars > 0 && this.ms > 0 ? this.ms / this.chars : Pace.DEFAULT_MS_PER_CHAR; }
  learn(ms: number, chars: number): void { this.ms += ms; this.chars += chars; }
}

/** How a frame is written (the single and the multi-context sockets shape theirs differently). */
export type FrameWriter = (audio: Buffer, alignment: WsAlignment | null) => string;

/**
 * One generation's audio, frame by frame as the upstream makes it. A frame covers the characters its
 * audio is reckoned to speak at the session's pace (at least one, so the first running record bills
 * something, and audio too short for a character of its own joins the next frame); the last frame,
 * which also carries the encoder's tail, covers the rest (at least one: the others stop one short of
 * the text). One frame is held back until the next audio comes, so the last one can be told from
 * the others. Billed: the whole text once the
 * upstream finished; cut (upstream broke off, the process killed), the characters of the frames
 * handed out so far — the running record before each frame bills exactly what the client has been
 * sent with it.
 */
export class SpokenMeter implements Meter {
  readonly mode = 'stream';
  done = false;
  produced = false;
  private readonly chars: string[];
  private pcmBytes = 0;
  /** Audio made and not handed out yet, and the PCM (ms) it covers up to. */
  private held: { audio: Buffer; endMs: number } | null = null;
  private sentChars = 0;
  private sentMs = 0;

  constructor(text: string, private readonly encoder: AudioEncoder, private readonly pcmRate: number,
    private readonly msPerChar: number, private readonly frame: FrameWriter) {
    this.chars = [...text];
  }

  onResponse(): { contentType: string } { return { contentType: 'application/json' }; }

  /** Milliseconds of speech the upstream has produced so far. */
  get spokenMs(): number { return (this.pcmBytes / 2 / this.pcmRate) * 1000; }

  onData(chunk: Buffer): string {
    this.pcmBytes += chunk.length;
    const audio = this.encoder.push(chunk);
    if (audio.length === 0) return '';
    this.produced = true;
    const held = this.held;
    this.held = { audio, endMs: this.spokenMs };
    if (!held) return '';
    // Audio too short to speak a character of its own joins the next frame (no frame goes out untimed).
    if (this.due(held.endMs) <= this.sentChars) { this.held = { audio: Buffer.concat([held.audio, audio]), endMs: this.spokenMs }; return ''; }
    return this.emit(held, false);
  }

  /** The characters reckoned spoken by `endMs` of audio: at least one, and one short of the text until its last frame. */
  private due(endMs: number): number {
    return Math.min(this.chars.length - 1, Math.max(1, Math.floor(endMs / this.msPerChar)));
  }

  onEnd(complete: boolean): string {
    if (!complete) {
      this.encoder.close?.();
      // Not whole: what was held back is handed out (it was made) with the characters it covers.
      const out = this.held ? this.emit(this.held, false) : '';
      this.held = null;
      return out;
    }
    const tail = this.encoder.end();
    const audio = Buffer.concat([this.held?.audio ?? Buffer.alloc(0), tail]);
    this.held = null;
    this.done = true;
    if (audio.length === 0 && this.sentChars === this.chars.length) return '';
    this.produced = true;
    return this.emit({ audio, endMs: this.spokenMs }, true);
  }

  private emit(f: { audio: Buffer; endMs: number }, last: boolean): string {
    const total = this.chars.length;
    const upTo = last ? total : Math.max(this.sentChars, this.due(f.endMs));
    const chars = this.chars.slice(this.sentChars, upTo);
    const ms = f.endMs - this.sentMs;
    this.sentChars = upTo;
    this.sentMs = f.endMs;
    return this.frame(f.audio, chars.length > 0 ? align(chars, ms) : null);
  }

  /** Characters covered by the frames handed out so far (the frame being sent included). */
  get charactersSent(): number { return this.sentChars; }

  usage(): Usage {
    if (this.done) return usage({ characters: this.chars.length, basis: 'exact' });
    return usage({ characters: this.sentChars, basis: 'partial' });
  }
}

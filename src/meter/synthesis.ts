// Meters synthesized speech: the characters are known before the call; the audio passes through an encoder to the client's format.
import type { Meter } from '../exchange/meter.js';
import { usage, type Usage } from '../exchange/usage.js';

/** Turns the upstream's audio into what the client asked for, read by read (an identity when they match). */
export interface AudioEncoder {
  push(chunk: Buffer): Buffer;
  end(): Buffer;
  /** Gives up without finishing (the reply broke or the client left): frees what it holds. */
  close?(): void;
}

export const IDENTITY: AudioEncoder = { push: (c) => c, end: () => Buffer.alloc(0) };

/** What a whole request bills: the characters of a synthesis, or the input seconds of a conversion (both known before the call). */
export interface WholeUnits { characters?: number; audioInMs?: number }

/**
 * Audio made from an input known whole before the call: a synthesis is billed by the characters of
 * its text, a conversion by the seconds of its input. Whole: exact. Dropped or broken after audio
 * reached the client: the whole input too (partial) — the upstream has been sent all of it, and the
 * work is not priced by what was heard; never more than the whole request. Before any audio: nothing.
 */
export class SpeechMeter implements Meter {
  readonly mode = 'stream';
  done = false;
  produced = false;

  constructor(private readonly bill: WholeUnits, private readonly encoder: AudioEncoder,
    private readonly contentType: string, private readonly headers: Record<string, string>) {}

  onResponse(): { contentType: string; headers: Record<string, string> } {
    return { contentType: this.contentType, headers: this.headers };
  }

  onData(chunk: Buffer): Buffer {
    const out = this.encoder.push(chunk);
    if (out.length > 0) this.produced = true;
    return out;
  }

  onEnd(complete: boolean): Buffer {
    if (!complete) { this.encoder.close?.(); return Buffer.alloc(0); }
    const out = this.encoder.end();
    if (out.length > 0) this.produced = true;
    this.done = true;
    return out;
  }

  known(): Usage {
    return usage({ ...this.bill, basis: 'exact' });
  }

  usage(): Usage {
    if (this.done) return usage({ ...this.bill, basis: 'exact' });
    return this.produced ? usage({ ...this.bill, basis: 'partial' }) : usage({ basis: 'partial' });
  }
}

/** Character timings spread over the audio's duration (seconds), in the family's REST alignment shape. */
export interface Alignment { characters: string[]; character_start_times_seconds: number[]; character_end_times_seconds: number[] }

/**
 * The upstream does not time characters, so Tollgate does: each character gets an equal share of the
 * audio's measured duration, in order, so the last one ends when the audio does (times rounded to ms).
 */
export function alignment(text: string, durationSecs: number): Alignment {
  const chars = [...text];
  const step = chars.length === 0 ? 0 : durationSecs / chars.length;
  const ms = (x: number) => Math.round(x * 1000) / 1000;
  return {
    characters: chars,
    character_start_times_seconds: chars.map((_, i) => ms(i * step)),
    character_end_times_seconds: chars.map((_, i) => ms((i + 1) * step)),
  };
}

/**
 * `/with-timestamps`: the upstream's PCM (S16LE mono at `pcmRate`) is read whole, encoded to the
 * client's format and sent as one JSON object with its alignment; `stream`: each read is a line
 * `{"audio_base64", "alignment": null}` and the last line carries the alignment of the whole text.
 */
export class TimestampsMeter implements Meter {
  done = false;
  produced = false;
  private pcmBytes = 0;
  private readonly parts: Buffer[] = [];

  constructor(readonly mode: 'buffered' | 'stream', private readonly text: string, private readonly pcmRate: number,
    private readonly encoder: AudioEncoder, private readonly headers: Record<string, string>) {}

  onResponse(): { contentType: string; headers: Record<string, string> } {
    return { contentType: 'application/json', headers: this.headers };
  }

  onData(chunk: Buffer): string {
    this.pcmBytes += chunk.length;
    const out = this.encoder.push(chunk);
    if (this.mode === 'buffered') { this.parts.push(out); return ''; }
    if (out.length === 0) return '';
    this.produced = true;
    return `${JSON.stringify({ audio_base64: out.toString('base64'), alignment: null, normalized_alignment: null })}\n`;
  }

  onEnd(complete: boolean): string {
    if (!complete) { this.encoder.close?.(); return ''; }
    const tail = this.encoder.end();
    this.done = true;
    this.produced = true;
    const a = alignment(this.text, this.pcmBytes / 2 / this.pcmRate);
    if (this.mode === 'buffered') {
      return JSON.stringify({ audio_base64: Buffer.concat([...this.parts, tail]).toString('base64'), alignment: a, normalized_alignment: a });
    }
    return `${JSON.stringify({ audio_base64: tail.toString('base64'), alignment: a, normalized_alignment: a })}\n`;
  }

  known(): Usage {
    return usage({ characters: [...this.text].length, basis: 'exact' });
  }

  usage(): Usage {
    if (this.done) return usage({ characters: [...this.text].length, basis: 'exact' });
    return usage({ characters: this.produced ? [...this.text].length : 0, basis: 'partial' });
  }
}

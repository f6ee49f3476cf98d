// Meters a transcription: the audio time Tollgate measured from the upload (never the client's or upstream's number); the reply is read whole and reshaped.
import type { Meter } from '../exchange/meter.js';
import { usage, type Usage } from '../exchange/usage.js';
import { upstreamMalformed } from '../proxy/upstream.js';

export class TranscriptMeter implements Meter {
  readonly mode = 'buffered';
  readonly produced = false;
  done = false;
  private readonly parts: Buffer[] = [];

  /** `contentType`: what `reshape` makes (the family's JSON by default; a subtitle format, an event stream). */
  constructor(private readonly audioInMs: number, private readonly reshape: (json: Record<string, unknown>) => string,
    private readonly contentType = 'application/json') {}

  onResponse(): { contentType: string } { return { contentType: this.contentType }; }

  onData(chunk: Buffer): string { this.parts.push(chunk); return ''; }

  onEnd(complete: boolean): string {
    if (!complete) throw upstreamMalformed();
    let json: unknown;
    try { json = JSON.parse(Buffer.concat(this.parts).toString('utf8')); } catch { throw upstreamMalformed(); }
    if (!json || typeof json !== 'object' || Array.isArray(json)) throw upstreamMalformed();
    const out = this.reshape(json as Record<string, unknown>);
    this.done = true;
    return out;
  }

  usage(): Usage {
    return usage({ audioInMs: this.done ? this.audioInMs : 0, basis: 'exact' });
  }
}

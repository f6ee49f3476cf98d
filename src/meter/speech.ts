// Meters an audio exchange whose whole input is measured before the call: speech billed by the characters of its text,
// a transcription or translation by the minutes of its uploaded audio. The reply passes through unchanged.
import type { IncomingHttpHeaders } from 'node:http';
import type { Meter } from '../exchange/meter.js';
import { usage, type Usage } from '../exchange/usage.js';

/** What the whole request bills, known before the call (its hold is exactly this). */
export interface WholeInput { characters?: number; audioInMs?: number }

/**
 * The dropped-stream rule (docs/upstreams.md, "Billing audio"): a reply that ends whole bills the whole
 * input (exact). A reply cut after any of it reached the client (the client left, or the upstream broke)
 * bills the whole input too (partial): the upstream was sent all of it and did the work, and it is never
 * more than the whole request nor less than what was delivered. Cut before anything reached the client:
 * nothing. An upstream error status bills nothing (the relay never settles it).
 */
export class WholeInputMeter implements Meter {
  done = false;
  produced = false;
  private readonly parts: Buffer[] = [];

  constructor(readonly mode: 'buffered' | 'stream', private readonly bill: WholeInput, private readonly fallbackType: string) {}

  onResponse(headers: IncomingHttpHeaders): { contentType: string } {
    const t = headers['content-type'];
    return { contentType: typeof t === 'string' && t !== '' ? t : this.fallbackType };
  }

  onData(chunk: Buffer): Buffer {
    if (chunk.length > 0) this.produced = true;
    if (this.mode === 'buffered') { this.parts.push(chunk); return Buffer.alloc(0); }
    return chunk;
  }

  onEnd(complete: boolean): Buffer {
    if (!complete) return Buffer.alloc(0);
    this.done = true;
    return this.mode === 'buffered' ? Buffer.concat(this.parts) : Buffer.alloc(0);
  }

  known(): Usage {
    return usage({ ...this.bill, basis: 'exact' });
  }

  usage(): Usage {
    if (this.done) return usage({ ...this.bill, basis: 'exact' });
    return this.produced ? usage({ ...this.bill, basis: 'partial' }) : usage({ basis: 'partial' });
  }
}

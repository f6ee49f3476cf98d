// Meters a reply from ElevenLabs' own API passed through untouched: billed by what Tollgate measured before the call; its usage headers kept for reconciliation.
import type { IncomingHttpHeaders } from 'node:http';
import type { Meter } from '../exchange/meter.js';
import { upstreamMalformed } from '../proxy/upstream.js';
import { usage, type Usage } from '../exchange/usage.js';
import type { WholeUnits } from './synthesis.js';

/**
 * ElevenLabs' headers about a request's cost and identity (`character-cost` is declared in its OpenAPI
 * spec; `x-character-count`, `request-id` and `history-item-id` are the names issue 27 gives, not in the
 * stored spec): whichever arrive are kept in the ledger entry's usage as `upstream_headers`, never used to price.
 */
export const RECONCILE_HEADERS = ['x-character-count', 'character-cost', 'request-id', 'history-item-id'] as const;

/**
 * The upstream's bytes go to the client as they came (`stream`), or whole once read and checked to be
 * JSON (`buffered`). Billed as SpeechMeter bills: whole, the units measured before the call (exact);
 * cut after output reached the client, the same units (partial: the upstream was sent all of it);
 * before any output, nothing.
 */
export class NativeMeter implements Meter {
  done = false;
  produced = false;
  private readonly parts: Buffer[] = [];
  private kept: Record<string, string> = {};

  constructor(readonly mode: 'buffered' | 'stream', private readonly bill: WholeUnits, private readonly headers: Record<string, string>) {}

  onResponse(h: IncomingHttpHeaders): { contentType: string; headers: Record<string, string> } {
    for (const name of RECONCILE_HEADERS) {
      const v = h[name];
      if (typeof v === 'string' && v.length <= 256) this.kept[name] = v;
    }
    return { contentType: h['content-type'] ?? (this.mode === 'buffered' ? 'application/json' : 'application/octet-stream'), headers: this.headers };
  }

  onData(chunk: Buffer): Buffer {
    if (this.mode === 'buffered') { this.parts.push(chunk); return Buffer.alloc(0); }
    if (chunk.length > 0) this.produced = true;
    return chunk;
  }

  onEnd(complete: boolean): Buffer {
    if (!complete) return Buffer.alloc(0);
    if (this.mode === 'stream') { this.done = true; return Buffer.alloc(0); }
    const body = Buffer.concat(this.parts);
    // A whole JSON reply or none: a body that does not parse is the upstream's failure, billed nothing.
    try { JSON.parse(body.toString('utf8')); } catch { throw upstreamMalformed(); }
    this.done = true;
    this.produced = true;
    return body;
  }

  usage(): Usage {
    if (this.done) return usage({ ...this.bill, basis: 'exact' });
    return this.produced ? usage({ ...this.bill, basis: 'partial' }) : usage({ basis: 'partial' });
  }

  /** The upstream's own accounting headers, for the ledger entry. */
  meta(): Record<string, unknown> {
    return Object.keys(this.kept).length > 0 ? { upstream_headers: this.kept } : {};
  }
}

// The meter's lifecycle: what a relay calls as an upstream reply passes through, and the usage it reads off it.
import type { IncomingHttpHeaders } from 'node:http';
import type { Usage } from './usage.js';

/**
 * Shaped like undici's response handlers: one per exchange, fed in order. A meter may rewrite what
 * it forwards (strip usage the client did not ask for, translate events), but never holds back more
 * than one incomplete event.
 */
export interface Meter {
  /**
   * `buffered`: the whole reply is read, then sent at once with its length (JSON); `stream`: each
   * read is forwarded as it comes.
   */
  readonly mode: 'buffered' | 'stream';
  /** The upstream answered 200: returns the content type and any headers for the client. */
  onResponse(headers: IncomingHttpHeaders): { contentType: string; headers?: Record<string, string> };
  /** Feeds one upstream read; returns what to forward now (empty when nothing is whole yet). */
  onData(chunk: Buffer): Buffer | string;
  /** The upstream reply ended (`complete`) or broke; returns what is left to forward. */
  onEnd(complete: boolean): Buffer | string;
  /** The reply reached its own end marker (a stream's `[DONE]`, a terminal event, a whole JSON body). */
  readonly done: boolean;
  /** True once any output was produced (tokens, audio): a dropped stream from then on is billed. */
  readonly produced: boolean;
  /** What was consumed: exact once the reply is whole, partial before. */
  usage(): Usage;
  /** What the ledger entry keeps besides the usage (an upstream's own accounting headers, for reconciliation). */
  meta?(): Record<string, unknown>;
  /**
   * A stream whose bill is fixed before its first byte (speech: the whole input, billed once any audio is
   * sent): that usage, so its cost goes out in the headers. Absent: the cost is known only at the end.
   */
  known?(): Usage;
}

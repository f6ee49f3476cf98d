// The session twin of relay-http.ts: one upstream reply through a meter into a session, each piece recorded on its Part before it is sent.
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../errors.js';
import type { UpstreamCall } from '../proxy/upstream.js';
import type { Meter } from './meter.js';
import type { Part } from './part.js';
import type { Usage } from './usage.js';

export interface PartRelay {
  part: Part;
  /** The upstream request, already sent (Upstreams.route over a model's pool, or Upstreams.call). */
  call: UpstreamCall;
  meter: Meter;
  /** The family's reading of an upstream error reply. */
  upstreamError(res: IncomingMessage): Promise<GatewayError>;
  /** A reply that sends nothing for this long is cut (and billed for what it produced). */
  idleMs: number;
  /**
   * Hands one piece of output to the session (a frame, an event); resolves once the session has taken
   * it (a slow client holds the relay back). `last`: the reply's tail, after its end.
   */
  send(out: Buffer | string, last: boolean): Promise<void>;
  /** Aborted when the session ends or the client cancels: the upstream call is stopped, and the part is billed what was produced. */
  signal?: AbortSignal;
  /** What the running records carry: what the part would bill now (default: the meter's usage). */
  usage?: () => Usage;
  /**
   * Record before every piece sent, each awaited (not once a second): a process killed at any moment
   * is billed exactly what the client was sent (plus at most the piece then on its way). For parts
   * whose pieces are few and large (a generation's frames); a token stream keeps the throttle.
   */
  recordEach?: boolean;
}

export interface PartOutcome {
  /** The reply reached its end whole (not cancelled, not broken). */
  complete: boolean;
  /** The signal stopped it. */
  cancelled: boolean;
  /** An error reply, an unreachable upstream, a reply that broke off or went idle (null when complete or cancelled). */
  failure: GatewayError | null;
  /** Some output was produced (and, unless cancelled first, sent). */
  produced: boolean;
  /** What the part used: exact when complete, what was produced otherwise. */
  usage: Usage;
}

/**
 * Relays an upstream reply into a session: an error status or an unreachable upstream is a failure
 * with nothing produced; a 200 is metered read by read and each piece of output is sent as it comes,
 * after the part's running record covers it (the first awaited, so no output reaches the client
 * unrecorded; later ones at most once a second; the tail's written and awaited). The relay does not end the
 * part: the caller ends it with the outcome's usage (and anything else the part used), then says so.
 */
export async function relayPart(r: PartRelay): Promise<PartOutcome> {
  const { part, meter, call } = r;
  const usage = r.usage ?? (() => meter.usage());
  const cancelled = () => r.signal?.aborted === true;
  const each = r.recordEach ? { wait: true, force: true } : {};
  const onAbort = () => call.abort();
  r.signal?.addEventListener('abort', onAbort, { once: true });
  let failure: GatewayError | null = null;
  let whole = false;
  try {
    if (cancelled()) call.abort();
    const res = await call.response;
    if (res.statusCode !== 200) {
      failure = await r.upstreamError(res);
    } else {
      meter.onResponse(res.headers);
      res.setTimeout(r.idleMs, () => res.destroy(new Error(`no data for ${r.idleMs} ms`)));
      // Read as `for await` reads, with the chunk let go once metered and sent (relay-http.ts says why).
      const reads = (res as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
      try {
        let step: IteratorResult<Buffer> | null = null;
        let chunk: Buffer | null = null;
        let out: Buffer | string = '';
        for (;;) {
          step = await reads.next();
          if (step.done) break;
          chunk = step.value;
          step = null;
          out = meter.onData(chunk);
          chunk = null;
          if (meter.produced && (out.length > 0 || !r.recordEach)) await part.record(usage(), each);
          const sent = out.length > 0 && !cancelled() ? r.send(out, false) : undefined;
          out = '';
          if (sent) await sent;
          if (cancelled()) { call.abort(); break; }
        }
      } finally {
        await reads.return?.();
      }
      whole = res.complete && !cancelled();
      if (!whole && !cancelled()) failure = brokeOff();
    }
  } catch (e) {
    if (!cancelled()) failure = e instanceof GatewayError ? e : brokeOff();
  } finally {
    r.signal?.removeEventListener('abort', onAbort);
    // A pool's call: the upstream's slot is free once its reply is read (or dropped).
    call.finish?.();
  }
  const tail = meter.onEnd(whole);
  if (meter.produced && tail.length > 0) await part.record(usage(), { wait: true, force: true });
  if (tail.length > 0 && !cancelled()) await r.send(tail, true);
  return { complete: whole && meter.done, cancelled: cancelled(), failure, produced: meter.produced, usage: usage() };
}

function brokeOff(): GatewayError {
  return new GatewayError({ status: 502, code: 'upstream_error', message: 'The upstream failed or broke off mid-reply.' });
}

// The upstream calls a realtime response makes (chat, speech): each relayed into the session on the response's Part, stopped when the response stops.
import type { ModelConfig, PoolEntry } from '../../../config.js';
import { GatewayError } from '../../../errors.js';
import type { Part } from '../../../exchange/part.js';
import type { Meter } from '../../../exchange/meter.js';
import { relayPart, type PartOutcome, type PartRelay } from '../../../exchange/relay-part.js';
import { usage, type Usage } from '../../../exchange/usage.js';
import { alpha } from '../family.js';
import type { SessionContext } from './context.js';
import type { Active } from './protocol.js';

export interface CallFor {
  part: Part;
  /** The model whose pool is called (as an HTTP request to it is: retry rule, health, protection). */
  model: Pick<ModelConfig, 'upstream' | 'pool'>;
  path: string;
  accept: string;
  /** The body for one upstream of the pool (its `upstream_model` in it). */
  body(entry: PoolEntry): Buffer;
  requestId: string;
  meter: Meter;
  send: PartRelay['send'];
  /** What the part's running records carry (what it would bill now). */
  usage: () => Usage;
}

/**
 * POSTs JSON to the model's pool for response `a` (Upstreams.route: another upstream only while none
 * can have done the work; billed once, for the attempt that answered) and relays its reply through `meter` into the session
 * (relayPart: each piece recorded on the part before it is sent; idle cut at the upstream's timeout);
 * a cancel, a drop or a failed sentence (a.stop) stops it. An upstream that cannot be called is a
 * failure with nothing produced.
 */
export async function callFor(ctx: SessionContext, a: Active, c: CallFor): Promise<PartOutcome> {
  let call;
  try {
    call = ctx.s.upstreams.route({ pool: c.model.pool, method: 'POST', path: c.path, headers: { ...ctx.headers, 'content-type': 'application/json', accept: c.accept },
      body: c.body, requestId: c.requestId });
  } catch (e) {
    const failure = e instanceof GatewayError ? e : new GatewayError({ status: 502, code: 'upstream_error', message: 'The upstream could not be called.' });
    return { complete: false, cancelled: false, failure, produced: false, usage: usage({ basis: 'exact' }) };
  }
  return relayPart({ part: c.part, call, meter: c.meter, upstreamError: (res) => alpha.upstreamError(res, c.requestId),
    idleMs: ctx.s.upstreams.config(c.model.upstream).timeoutMs, send: c.send, signal: a.stop.signal, usage: c.usage });
}

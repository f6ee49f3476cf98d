// The upstream calls a realtime response makes (chat, speech): tied to the response, so a cancel or a dropped socket aborts them.
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../../../errors.js';
import type { UpstreamCall } from '../../../proxy/upstream.js';
import { alpha } from '../family.js';
import type { SessionContext } from './context.js';
import type { Active } from './protocol.js';

/**
 * POSTs JSON to an upstream for response `a` (a cancel or a dropped socket aborts it): its 200 reply
 * to read, or the upstream's refusal in the family's terms.
 */
export async function callFor(ctx: SessionContext, a: Active, upstream: string, path: string, accept: string, body: Buffer, requestId: string):
  Promise<{ call: UpstreamCall; res: IncomingMessage | null; failed: GatewayError | null }> {
  const call = ctx.s.upstreams.call(upstream, 'POST', path, { ...ctx.headers, 'content-type': 'application/json', accept }, body, requestId);
  a.calls.add(call);
  void call.response.then((res) => res.once('close', () => a.calls.delete(call)), () => a.calls.delete(call));
  if (a.cancelled || a.dropped) call.abort();
  const res = await call.response;
  if (res.statusCode !== 200) return { call, res: null, failed: await alpha.upstreamError(res, requestId) };
  return { call, res, failed: null };
}

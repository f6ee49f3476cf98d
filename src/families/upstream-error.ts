// An OpenAI-compatible upstream's error reply, read into the error the client sees (both families' upstreams speak it).
import type http from 'node:http';
import { GatewayError } from '../errors.js';
import { collect, upstreamFailed } from '../proxy/upstream.js';
import { log } from '../observe/log.js';

/**
 * An upstream error status: a 400/404/422 is the request's fault and keeps the upstream's message
 * (the client must see why); anything else is the host's fault, logged and reported as 502.
 */
export async function openAiUpstreamError(res: http.IncomingMessage, requestId: string): Promise<GatewayError> {
  const status = res.statusCode ?? 502;
  let raw = '';
  try { raw = (await collect(res)).toString('utf8').slice(0, 4096); } catch { /* body lost: the status still says enough */ }
  log('warn', 'upstream error', { request_id: requestId, status, body: raw.slice(0, 1024) });
  if (status === 400 || status === 422) {
    let message = 'The model host rejected the request.';
    let param: string | null = null;
    try {
      const e = (JSON.parse(raw) as { error?: { message?: unknown; param?: unknown }; message?: unknown });
      const m = e.error?.message ?? e.message;
      if (typeof m === 'string') message = m.slice(0, 1000);
      if (typeof e.error?.param === 'string') param = e.error.param;
    } catch { /* not JSON */ }
    return new GatewayError({ status: 400, code: 'upstream_invalid_request', param, message });
  }
  return upstreamFailed(status);
}

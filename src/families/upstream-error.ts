// An OpenAI-compatible upstream's error reply, read into the error the client sees (both families' upstreams speak it).
import type http from 'node:http';
import { GatewayError } from '../errors.js';
import { collect, upstreamFailed } from '../proxy/upstream.js';
import { log } from '../observe/log.js';

/**
 * An upstream error status: a 400/404/422 is the request's fault and keeps the upstream's message
 * (the client must see why); a prompt past the model's context (llama.cpp's `exceed_context_size_error`,
 * or OpenAI's own code from a host that passes it on) is OpenAI's `context_length_exceeded`; anything
 * else is the host's fault, logged (with the host's body) and reported as a 502 that says nothing of the
 * host's insides: a 5xx body can be a traceback or name the host.
 */
export async function openAiUpstreamError(res: http.IncomingMessage, requestId: string): Promise<GatewayError> {
  const status = res.statusCode ?? 502;
  let raw = '';
  try { raw = (await collect(res)).toString('utf8').slice(0, 4096); } catch { /* body lost: the status still says enough */ }
  log('warn', 'upstream error', { request_id: requestId, status, body: raw.slice(0, 1024) });
  const said = readError(raw);
  if (status === 400 || status === 422) {
    const message = said.message ?? 'The model host rejected the request.';
    if (said.type === 'exceed_context_size_error' || said.code === 'context_length_exceeded') {
      return new GatewayError({ code: 'context_length_exceeded', param: said.param, message });
    }
    return new GatewayError({ code: 'upstream_invalid_request', param: said.param, message });
  }
  return upstreamFailed(status);
}

/**
 * The fields of an OpenAI-style error body (`{"error":{...}}`, a bare `{"message"}`, or FastAPI's
 * `{"detail": "..."}` / `{"detail": {"error": {...}}}` as faster-whisper-server sends it); nulls when it is not one.
 */
function readError(raw: string): { message: string | null; type: string | null; code: string | null; param: string | null } {
  const out = { message: null as string | null, type: null as string | null, code: null as string | null, param: null as string | null };
  try {
    const j = JSON.parse(raw) as { error?: Record<string, unknown> | string; message?: unknown; detail?: unknown };
    const d = typeof j.detail === 'object' && j.detail !== null && !Array.isArray(j.detail) ? j.detail as Record<string, unknown> : {};
    const e = typeof j.error === 'object' && j.error !== null ? j.error
      : typeof d.error === 'object' && d.error !== null ? d.error as Record<string, unknown> : {};
    const m = e.message ?? (typeof j.error === 'string' ? j.error : undefined) ?? j.message ?? d.message
      ?? (typeof j.detail === 'string' ? j.detail : undefined);
    if (typeof m === 'string' && m.trim()) out.message = m.slice(0, 1000);
    if (typeof e.type === 'string') out.type = e.type;
    if (typeof e.code === 'string') out.code = e.code;
    if (typeof e.param === 'string') out.param = e.param;
  } catch { /* not JSON */ }
  return out;
}

// An upstream's error (an HTTP reply, or a socket's error frame or close), read into the error the client sees: one table for every upstream and both families.
import type http from 'node:http';
import { GatewayError, type ValidationDetail } from '../errors.js';
import { collect, upstreamFailed } from '../proxy/upstream.js';
import { retryAfterMs } from '../proxy/routed.js';
import { log } from '../observe/log.js';

/** What an upstream said about its failure: its status (HTTP, or reckoned from a socket error's name), and what its body names. */
export interface UpstreamSaid {
  status: number;
  message: string | null;
  type: string | null;
  code: string | null;
  param: string | null;
  /** A FastAPI validation list (`detail: [{loc, msg, type}]`, ElevenLabs' 422). */
  detail: ValidationDetail[] | null;
  /** The upstream's Retry-After (or retry-after-ms), in ms. */
  retryMs?: number;
}

/**
 * The table (docs/elevenlabs.md, "What an upstream's error becomes"):
 * - 400/422, the request's fault: the same status with the upstream's message (a prompt past the
 *   model's context, llama.cpp's `exceed_context_size_error` or OpenAI's own code, is `context_length_exceeded`);
 * - 404, a voice or model the upstream does not know: 404 with its message (`voice_not_found`,
 *   `model_not_found` when the upstream names it so);
 * - 429, the upstream limiting the gateway (a pool has retried it elsewhere already, src/proxy/routed.ts):
 *   429 with the upstream's Retry-After and retry-after-ms passed on;
 * - 401/403, the upstream refusing the operator's key: 502 saying so, never 401 (the client would read
 *   it as its own key); anything else is the host's fault, a 502 that says nothing of the host's insides.
 * Every one bills nothing; the host's body is logged by the caller, not passed on.
 */
export function upstreamErrorOf(said: UpstreamSaid): GatewayError {
  const { status } = said;
  if (status === 400 || status === 422) {
    const message = said.message ?? 'The model host rejected the request.';
    if (said.type === 'exceed_context_size_error' || said.code === 'context_length_exceeded') {
      return new GatewayError({ code: 'context_length_exceeded', param: said.param, message });
    }
    return new GatewayError({ status, code: 'upstream_invalid_request', param: said.param, message, ...(status === 422 && said.detail ? { detail: said.detail } : {}) });
  }
  if (status === 404) {
    const code = said.code === 'voice_not_found' || said.code === 'model_not_found' ? said.code : 'not_found';
    return new GatewayError({ code, message: `The model host does not know what this request names: ${said.message ?? 'not found'} Nothing was billed.` });
  }
  if (status === 429) {
    const ms = said.retryMs;
    const headers: Record<string, string> = ms === undefined ? {} : { 'retry-after': String(Math.ceil(ms / 1000)), 'retry-after-ms': String(Math.round(ms)) };
    return new GatewayError({ code: 'upstream_rate_limited', retryable: true, headers,
      message: `The model host is limiting this gateway's requests${ms === undefined ? '' : `; retry after ${Math.ceil(ms / 1000)} s`}. Nothing was billed.` });
  }
  if (status === 401 || status === 403) {
    return new GatewayError({ code: 'upstream_error',
      message: `The model host refused the gateway's own credentials for it (status ${status}): this is the gateway operator's upstream key, not your API key. Nothing was billed.` });
  }
  return upstreamFailed(status);
}

/** An upstream's HTTP error reply (an OpenAI-compatible host's or ElevenLabs' own), read and logged, as the client should see it. */
export async function upstreamError(res: http.IncomingMessage, requestId: string): Promise<GatewayError> {
  const status = res.statusCode ?? 502;
  let raw = '';
  try { raw = (await collect(res)).toString('utf8').slice(0, 4096); } catch { /* body lost: the status still says enough */ }
  log('warn', 'upstream error', { request_id: requestId, status, body: raw.slice(0, 1024) });
  const retryMs = retryAfterMs(res);
  return upstreamErrorOf({ status, ...readError(raw), ...(retryMs === undefined ? {} : { retryMs }) });
}

/**
 * ElevenLabs' socket error names (the `error` of its `{message, error, code}` frame, or a close reason), with
 * the HTTP status each means: the socket has no status of its own. An unknown name is the host's fault.
 */
const SOCKET_STATUS: Record<string, number> = {
  invalid_api_key: 401, unauthorized: 401, quota_exceeded: 401, missing_permissions: 403,
  voice_not_found: 404, model_not_found: 404, not_found: 404,
  rate_limit_exceeded: 429, too_many_concurrent_requests: 429, system_busy: 429,
  invalid_request: 400, invalid_message: 400, validation_error: 422, max_active_conversations: 400, input_timeout_exceeded: 400,
};

/**
 * An upstream socket's error frame (`{message, error, code}`) or its close (code and reason, no frame before
 * it), read through the same table as an HTTP reply: the family renders the result as its socket error.
 */
export function upstreamSocketError(said: { error?: unknown; message?: unknown; code?: unknown; reason?: string }, sessionId: string): GatewayError {
  log('warn', 'upstream socket error', { session: sessionId, error: String(said.error ?? ''), message: String(said.message ?? said.reason ?? '').slice(0, 1024), code: String(said.code) });
  const name = typeof said.error === 'string' ? said.error : (said.reason ?? '').split(/[:\s]/, 1)[0] ?? '';
  const message = typeof said.message === 'string' && said.message.trim() ? said.message.slice(0, 1000) : said.reason?.slice(0, 1000) || null;
  const status = SOCKET_STATUS[name] ?? (/api key/i.test(message ?? '') ? 401 : 502);
  return upstreamErrorOf({ status, message, type: null, code: name || null, param: null, detail: null });
}

/**
 * The fields of an error body: OpenAI's (`{"error":{...}}`, a bare `{"message"}`), ElevenLabs' and FastAPI's
 * (`{"detail": {"status", "message"}}`, `{"detail": "..."}`, `{"detail": [{loc, msg, type}]}`, `{"detail": {"error": {...}}}`
 * as faster-whisper-server sends it); nulls when it is not one.
 */
function readError(raw: string): Omit<UpstreamSaid, 'status' | 'retryMs'> {
  const out: Omit<UpstreamSaid, 'status' | 'retryMs'> = { message: null, type: null, code: null, param: null, detail: null };
  try {
    const j = JSON.parse(raw) as { error?: Record<string, unknown> | string; message?: unknown; detail?: unknown };
    const d = typeof j.detail === 'object' && j.detail !== null && !Array.isArray(j.detail) ? j.detail as Record<string, unknown> : {};
    const e = typeof j.error === 'object' && j.error !== null ? j.error
      : typeof d.error === 'object' && d.error !== null ? d.error as Record<string, unknown> : {};
    const list = Array.isArray(j.detail) ? validationList(j.detail) : null;
    const m = e.message ?? (typeof j.error === 'string' ? j.error : undefined) ?? j.message ?? d.message
      ?? (typeof j.detail === 'string' ? j.detail : undefined) ?? list?.[0]?.msg;
    if (typeof m === 'string' && m.trim()) out.message = m.slice(0, 1000);
    if (typeof e.type === 'string') out.type = e.type;
    if (typeof e.code === 'string') out.code = e.code;
    else if (typeof d.status === 'string') out.code = d.status;
    if (typeof e.param === 'string') out.param = e.param;
    else if (list?.[0]) out.param = String(list[0].loc.at(-1) ?? '') || null;
    out.detail = list;
  } catch { /* not JSON */ }
  return out;
}

/** A FastAPI validation list, kept to its `loc`, `msg` and `type` (null when it is not one). */
function validationList(items: unknown[]): ValidationDetail[] | null {
  const out: ValidationDetail[] = [];
  for (const it of items.slice(0, 20)) {
    const v = it as { loc?: unknown; msg?: unknown; type?: unknown };
    if (!Array.isArray(v.loc) || typeof v.msg !== 'string') return null;
    out.push({ loc: v.loc.filter((l): l is string | number => typeof l === 'string' || typeof l === 'number'), msg: v.msg.slice(0, 500), type: typeof v.type === 'string' ? v.type : 'value_error' });
  }
  return out.length > 0 ? out : null;
}

// HTTP plumbing shared by the sim's routes: the OpenAI error envelope, per-request injected faults, JSON replies.
import type http from 'node:http';

/** A request the sim refuses: becomes an OpenAI error envelope with this status. */
export class SimError extends Error {
  constructor(readonly status: number, message: string, readonly param: string | null = null, readonly code: string | null = null) {
    super(message);
  }
}

/** Per-request behaviour read from the `x-sim-*` headers. */
export interface Faults {
  /** Milliseconds between generated tokens (and, non-streaming, per token before the reply). */
  delayMs: number;
  /** Streaming: die after this many content tokens; non-streaming: send half the body, then die. */
  truncateAfter: number | null;
  /** A body (or one SSE event) that is not JSON. */
  malformed: boolean;
}

const JSON_HEADERS = { 'content-type': 'application/json' };

function errorType(status: number): string {
  if (status >= 500) return 'server_error';
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  return 'invalid_request_error';
}

export function sendError(res: http.ServerResponse, status: number, message: string, param: string | null = null, code: string | null = null): void {
  const body = JSON.stringify({ error: { message, type: errorType(status), param, code } });
  res.writeHead(status, JSON_HEADERS).end(body);
}

export function sendSimError(res: http.ServerResponse, e: SimError): void {
  sendError(res, e.status, e.message, e.param, e.code);
}

/** A 200 JSON reply, subject to the malformed / truncate faults. */
export function sendJson(res: http.ServerResponse, text: string, f: Faults): void {
  if (f.malformed) {
    res.writeHead(200, JSON_HEADERS).end(text.slice(0, text.length >> 1)); // a prefix of an object is never valid JSON
    return;
  }
  if (f.truncateAfter !== null) {
    const head = text.slice(0, text.length >> 1);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) });
    res.write(head, () => res.destroy());
    return;
  }
  res.writeHead(200, JSON_HEADERS).end(text);
}

/** Reads a header as a finite number, or null when absent or not a number. */
export function numberHeader(req: http.IncomingMessage, name: string): number | null {
  const v = req.headers[name];
  if (typeof v !== 'string' || v.trim() === '') return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

export function faultsOf(req: http.IncomingMessage, defaultDelayMs: number): Faults {
  const delay = numberHeader(req, 'x-sim-token-delay-ms');
  const truncate = numberHeader(req, 'x-sim-truncate-after');
  return {
    delayMs: delay !== null && delay >= 0 ? delay : defaultDelayMs,
    truncateAfter: truncate !== null && truncate >= 0 ? Math.floor(truncate) : null,
    malformed: req.headers['x-sim-malformed'] === '1' || req.headers['x-sim-malformed'] === 'true',
  };
}

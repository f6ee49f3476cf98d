// Reading upstream responses: bounded collection, error mapping, and the JSON usage block of a buffered reply.
import type http from 'node:http';
import { GatewayError } from '../errors.js';
import { upstreamFailed, upstreamMalformed } from '../proxy/upstream.js';
import { log } from '../server/log.js';
import { readUsage } from '../meter/sse.js';

const MAX_UPSTREAM_BODY = 64 * 1024 * 1024;

/** Reads a whole upstream body (bounded); a body cut short is a malformed reply. */
export function collect(res: http.IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    res.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_UPSTREAM_BODY) { res.destroy(); reject(upstreamMalformed()); return; }
      parts.push(chunk);
    });
    res.once('end', () => {
      if (!res.complete) reject(upstreamMalformed());
      else resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size));
    });
    // The upstream cut the body short (socket reset mid-response).
    res.once('error', () => reject(upstreamMalformed()));
    res.once('close', () => { if (!res.complete) reject(upstreamMalformed()); });
  });
}

/**
 * An upstream error status: a 400/404/422 is the request's fault and keeps the upstream's message
 * (the client must see why); anything else is the host's fault, logged and reported as 502.
 */
export async function upstreamError(res: http.IncomingMessage, requestId: string): Promise<GatewayError> {
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

export interface JsonUsage { input: number; output: number; reasoning: number; reported: boolean }

export function usageOf(body: Record<string, unknown>): JsonUsage {
  const u = readUsage(body.usage);
  return u ? { ...u, reported: true } : { input: 0, output: 0, reasoning: 0, reported: false };
}

export function parseUpstreamJson(buf: Buffer): Record<string, unknown> {
  try {
    const v = JSON.parse(buf.toString('utf8')) as unknown;
    if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch { /* fall through */ }
  throw upstreamMalformed();
}

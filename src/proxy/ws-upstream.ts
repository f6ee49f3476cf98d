// The WebSocket upstream client: opens an upstream's socket (ws:// or wss:// from its base_url, its key as a bearer, or as xi-api-key for ElevenLabs), failures as GatewayErrors.
import type { IncomingMessage } from 'node:http';
import WebSocket from 'ws';
import type { GatewayError } from '../errors.js';
import type { Upstreams } from './upstream.js';
import { FORWARDED, upstreamTimeout, upstreamUnavailable } from './upstream.js';
import { log } from '../observe/log.js';

export type { WebSocket };

/** The largest frame an upstream may send (a whole audio item can be large; past this the upstream socket is closed). */
const MAX_UPSTREAM_FRAME = 16 * 1024 * 1024;

export interface WsOpen {
  /** Path and query on the upstream, e.g. `/v1/realtime?model=gpt-realtime`. */
  path: string;
  /** The client's headers: only FORWARDED and the upstream's forward_headers pass (as on HTTP calls). */
  clientHeaders: Record<string, string>;
  requestId: string;
  /** Reads an upstream's HTTP refusal of the upgrade as the family's error. */
  refusal(res: IncomingMessage, requestId: string): Promise<GatewayError>;
}

/** `http(s)://host/base` as `ws(s)://host/base`. */
export function wsBase(httpBase: string): string {
  return httpBase.replace(/^http/i, 'ws');
}

/**
 * Opens the upstream socket: resolves once it is open (paused: `resume()` it once listening), or rejects with a GatewayError (the upstream's
 * refusal in the family's terms, 502 unreachable, 504 past the upstream's timeout).
 */
export function openUpstreamSocket(ups: Upstreams, name: string, o: WsOpen): Promise<WebSocket> {
  const cfg = ups.config(name);
  const headers: Record<string, string> = { 'x-request-id': o.requestId };
  for (const k of FORWARDED) { const v = o.clientHeaders[k]; if (v !== undefined) headers[k] = v; }
  const extra = cfg.forwardHeaders;
  for (const k in o.clientHeaders) if (extra.names.includes(k) || extra.prefixes.some((p) => k.startsWith(p))) headers[k] = o.clientHeaders[k]!;
  if (cfg.apiKeyEnv) {
    const secret = process.env[cfg.apiKeyEnv] ?? '';
    // ElevenLabs' stream-input takes its key as the xi-api-key header at the upgrade (its AsyncAPI spec).
    if (cfg.protocol === 'elevenlabs') headers['xi-api-key'] = secret;
    else headers.authorization = `Bearer ${secret}`;
  }
  const url = `${wsBase(ups.baseUrl(name))}${o.path}`;
  return new Promise<WebSocket>((resolve, reject) => {
    let settled = false;
    const ws = new WebSocket(url, undefined, { headers, handshakeTimeout: cfg.timeoutMs, maxPayload: MAX_UPSTREAM_FRAME, perMessageDeflate: false });
    const fail = (e: GatewayError) => { if (!settled) { settled = true; reject(e); } };
    // Paused until the caller has its listeners on: the upstream's first frames may come in the same read as its 101.
    ws.once('open', () => { settled = true; ws.pause(); resolve(ws); });
    ws.once('unexpected-response', (req, res) => {
      void o.refusal(res, o.requestId).then(fail, () => fail(upstreamUnavailable(new Error('refused')))).finally(() => req.destroy());
    });
    ws.on('error', (err) => {
      if (settled) return;
      const timedOut = /timed out/i.test(err.message);
      if (!timedOut) log('warn', 'upstream unreachable', { request_id: o.requestId, upstream: name, error: (err as { code?: string }).code ?? err.message });
      fail(timedOut ? upstreamTimeout(cfg.timeoutMs) : upstreamUnavailable(err));
    });
  });
}

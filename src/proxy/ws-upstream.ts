// The WebSocket upstream client: opens an upstream's socket (ws:// or wss:// from its base_url, its key as a bearer, or as xi-api-key for ElevenLabs), failures as GatewayErrors.
import type { IncomingMessage } from 'node:http';
import WebSocket from 'ws';
import type { GatewayError } from '../errors.js';
import type { PoolEntry } from '../config.js';
import type { Upstreams } from './upstream.js';
import { retryAfterMs } from './routed.js';
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

/** One attempt at an upstream's socket: open, or why not (a refused upgrade's status and Retry-After; a connection that never reached the upstream). */
type SocketAttempt =
  | { ok: true; ws: WebSocket }
  | { ok: false; error: GatewayError; status?: number; retryAfterMs?: number; unreached: boolean };

/**
 * Opens the upstream socket: resolves once it is open (paused: `resume()` it once listening), or rejects with a GatewayError (the upstream's
 * refusal in the family's terms, 502 unreachable, 504 past the upstream's timeout).
 */
export async function openUpstreamSocket(ups: Upstreams, name: string, o: WsOpen): Promise<WebSocket> {
  const a = await attemptSocket(ups, name, o);
  if (!a.ok) throw a.error;
  return a.ws;
}

function attemptSocket(ups: Upstreams, name: string, o: WsOpen): Promise<SocketAttempt> {
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
  return new Promise<SocketAttempt>((resolve) => {
    let settled = false;
    const ws = new WebSocket(url, undefined, { headers, handshakeTimeout: cfg.timeoutMs, maxPayload: MAX_UPSTREAM_FRAME, perMessageDeflate: false });
    const fail = (a: SocketAttempt) => { if (!settled) { settled = true; resolve(a); } };
    // Paused until the caller has its listeners on: the upstream's first frames may come in the same read as its 101.
    ws.once('open', () => { settled = true; ws.pause(); resolve({ ok: true, ws }); });
    ws.once('unexpected-response', (req, res) => {
      const status = res.statusCode ?? 502;
      const wait = retryAfterMs(res);
      const refused = (error: GatewayError): SocketAttempt => ({ ok: false, error, status, unreached: false, ...(wait !== undefined ? { retryAfterMs: wait } : {}) });
      void o.refusal(res, o.requestId).then((e) => fail(refused(e)), () => fail(refused(upstreamUnavailable(new Error('refused'))))).finally(() => req.destroy());
    });
    ws.on('error', (err) => {
      if (settled) return;
      const timedOut = /timed out/i.test(err.message);
      if (!timedOut) log('warn', 'upstream unreachable', { request_id: o.requestId, upstream: name, error: (err as { code?: string }).code ?? err.message });
      fail(timedOut ? { ok: false, error: upstreamTimeout(cfg.timeoutMs), unreached: false } : { ok: false, error: upstreamUnavailable(err), unreached: true });
    });
  });
}

/** A pooled upstream socket: open on `entry`, holding its lease (one `max_concurrency` slot) until `release`, which the socket's close also calls. */
export interface PooledSocket {
  ws: WebSocket;
  entry: PoolEntry;
  /** Frees the upstream's slot, once (the socket's close calls it too). */
  release(): void;
}

/**
 * Opens a session's upstream socket on a model's pool, as routeCall sends an HTTP request: the best
 * upstream takes it (one rpm start, one `max_concurrency` slot, held for the socket's life); a
 * connection that never reached the upstream, or an upgrade refused with 429/503 (nothing generated),
 * goes to the next upstream before the client sees anything; any other refusal or a timeout is the
 * session's answer. Health: ok once open; a connect failure, a timeout or a 5xx counts toward an
 * ejection; a Retry-After pauses the upstream. Every upstream full: 503 upstream_busy (Pools.acquire).
 * `path` is per upstream (a cloned voice's id there may be in it).
 */
export async function openPooledSocket(ups: Upstreams, pool: readonly PoolEntry[], o: Omit<WsOpen, 'path'> & { path: (entry: PoolEntry) => string },
  maxAttempts = ups.maxAttempts): Promise<PooledSocket> {
  const tried = new Set<string>();
  const deadline = Date.now() + ups.config(pool[0]!.name).timeoutMs;
  for (let attempt = 1; ; attempt++) {
    const lease = await ups.pools.acquire(pool, tried, deadline, () => false);
    if (!lease) throw new Error('a pool with no upstream to try'); // unreachable: the loop stops before every one is tried
    tried.add(lease.entry.name);
    const a = await attemptSocket(ups, lease.entry.name, { ...o, path: o.path(lease.entry) });
    if (a.ok) {
      lease.ok();
      a.ws.once('close', () => lease.release());
      return { ws: a.ws, entry: lease.entry, release: () => lease.release() };
    }
    const busy = a.status === 429 || a.status === 503;
    if (a.retryAfterMs !== undefined && busy) lease.pause(a.retryAfterMs);
    if (a.unreached || a.status === 503 || (a.status !== undefined && a.status >= 500) || a.error.code === 'upstream_timeout') lease.failed();
    else if (a.status !== 429) lease.ok();
    lease.release();
    const again = (a.unreached || busy) && attempt < maxAttempts && tried.size < pool.length && Date.now() < deadline;
    if (!again) throw a.error;
    ups.pools.retried(lease.entry.name);
    log('info', 'upstream socket retried elsewhere', { request_id: o.requestId, upstream: lease.entry.name, reason: a.status ? `status ${a.status}` : a.error.message });
  }
}

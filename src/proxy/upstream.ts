// http-proxy-3 driven from uWS: a small request/response adapter, keep-alive agents, and fault mapping.
import http from 'node:http';
import https from 'node:https';
import { EventEmitter } from 'node:events';
import type { Readable, Stream } from 'node:stream';
import type { Socket } from 'node:net';
import { createProxyServer } from 'http-proxy-3';
import { GatewayError, clientClosed } from '../errors.js';
import type { ModelConfig, UpstreamConfig } from '../config.js';
import { log } from '../observe/log.js';
import { Pools } from './pool.js';
import type { SharedLimits } from './shared-limits.js';
import { routeCall, type RouteSpec, type RoutedCall } from './routed.js';
import { startProbes } from './probe.js';

/**
 * What http-proxy-3 reads from an incoming request: method, url, headers, socket, and `on('error')`.
 * The body comes from `options.buffer`, so this need not be a stream (a Readable per request costs
 * measurable CPU and garbage at thousands of requests a second: docs/benchmarks.md).
 */
class AdaptedRequest {
  readonly httpVersionMajor = 1;
  readonly httpVersionMinor = 1;
  readonly socket = { destroyed: false, encrypted: false, remoteAddress: '127.0.0.1' };
  readonly connection = this.socket;
  constructor(readonly method: string, readonly url: string, readonly headers: http.OutgoingHttpHeaders) {}
  on(): this { return this; } // the body is already in memory: this request never errors
}

/** The body as http-proxy-3 sends it: it only calls `buffer.pipe(proxyReq)`. One write, no stream machinery. */
class BodySource {
  constructor(private body: Buffer | undefined) {}
  /** Called once; the body is let go of here (http-proxy-3 keeps this object as long as the reply runs). */
  pipe<T extends NodeJS.WritableStream>(dest: T): T { const b = this.body ?? Buffer.alloc(0); this.body = undefined; dest.end(b); return dest; }
}

/** A body sent as it is read (never whole in memory), of a length known in advance. */
export interface StreamedBody {
  length: number;
  stream: Readable;
}

/** What it reads from the response: `close` (the client left: it destroys the upstream request) and state flags. */
class AdaptedResponse extends EventEmitter {
  outgoing: http.ClientRequest | undefined = undefined;
  writableFinished = false;
  headersSent = false;
  finished = false;
}

/**
 * One proxied request. A class, not an object literal: one lives as long as each reply, and a literal
 * with a getter is a dictionary-mode object (heap snapshots at 9,900 open streams: issue 29).
 */
class ProxiedCall implements UpstreamCall {
  response!: Promise<http.IncomingMessage>;
  readonly res = new AdaptedResponse();
  timer: NodeJS.Timeout | undefined;
  timedOut = false;
  clientGone = false;

  get written(): boolean { return this.res.outgoing?.writableFinished === true; }

  abort(): void {
    this.clientGone = true;
    clearTimeout(this.timer);
    this.cut();
  }

  /** Ends the upstream request (http-proxy-3 aborts it when the response it writes to closes). */
  cut(): void {
    if (!this.res.writableFinished) this.res.emit('close');
  }
}

export interface UpstreamCall {
  response: Promise<http.IncomingMessage>;
  /** Stops the upstream request (client gone or timeout); the upstream sees its socket close. */
  abort(): void;
  /** The request was written whole to the upstream's socket (after a failure: it may have done the work). */
  readonly written?: boolean;
  /** The reply is done with (relayed, failed or dropped): a pool frees the upstream's slot. */
  finish?(): void;
}

/** An upstream's base URL, and its path (no trailing slash) and query (no `?`) to join each request's path to. */
interface Target { url: URL; path: string; query: string }

/**
 * The path an upstream is sent: `path` as a WHATWG URL parse leaves it, after the base URL's path, with the base
 * URL's query and the path's joined by `&`. That is what http-proxy-3 makes of the two by default, parsing both
 * on every request; here a path already in its normal form is not parsed (docs/benchmarks.md).
 */
export function upstreamPath(base: Pick<Target, 'path' | 'query'>, path: string): string {
  let p = path;
  if (!isNormalPath(p)) {
    // As http-proxy-3 parses it: a path starting `//` would otherwise name a host.
    const u = new URL(p.startsWith('//') ? `http://base.invalid${p}` : p, 'http://base.invalid');
    p = u.pathname + u.search;
  }
  if (base.query === '') return base.path + p;
  const q = p.indexOf('?');
  return q < 0 ? `${base.path}${p}?${base.query}` : `${base.path}${p.slice(0, q)}?${base.query}&${p.slice(q + 1)}`;
}

/**
 * A path (and query) that a WHATWG URL parse leaves unchanged: only characters no part of it percent-encodes, no
 * segment starting with a dot (`.` and `..`, written or as %2e, are resolved), no `//` at the start (a host),
 * and no empty query.
 */
export function isNormalPath(p: string): boolean {
  return NORMAL_PATH.test(p) && !DOT_SEGMENT.test(p);
}
const NORMAL_PATH = /^\/(?!\/)[\w\-.~!$&()*+,;=:@/%]*(?:\?[\w\-.~!$&()*+,;=:@/%?]+)?$/;
const DOT_SEGMENT = /\/(?:\.|%2e)/i;

/**
 * How long a pooled connection to an upstream may sit idle before it is closed here: under the 5 s after which
 * uvicorn (vLLM), llama.cpp's server and Node's own close an idle keep-alive connection. A request sent on a
 * connection the upstream is closing at that moment fails after it was written (ECONNRESET), and such a request
 * is not retried (the upstream may have done the work): closing first leaves no such moment. A server that
 * announces a shorter `Keep-Alive: timeout=` is held to that, less a second, by Node's agent.
 */
export const UPSTREAM_IDLE_MS = 4000;

/**
 * A keep-alive agent whose free connections close after UPSTREAM_IDLE_MS idle. Only free ones: a connection in
 * use has no idle timer (a stream may wait longer than that for its next token), as with Node's agent unset.
 * keepSocketAlive and reuseSocket are the hooks Node documents for this.
 */
class HttpUpstreamAgent extends http.Agent {
  override keepSocketAlive(socket: Socket): boolean { return idleAfterUse(super.keepSocketAlive(socket) as unknown, socket); }
  override reuseSocket(socket: Socket, request: http.ClientRequest): void { super.reuseSocket(socket, request); socket.setTimeout(0); }
}

class HttpsUpstreamAgent extends https.Agent {
  override keepSocketAlive(socket: Socket): boolean { return idleAfterUse(super.keepSocketAlive(socket) as unknown, socket); }
  override reuseSocket(socket: Socket, request: http.ClientRequest): void { super.reuseSocket(socket, request); socket.setTimeout(0); }
}

/** Node's agent returns false to close the connection; otherwise it has set the server's announced timeout, less a second, if any: the shorter wins. */
function idleAfterUse(kept: unknown, socket: Socket): boolean {
  if (kept === false) return false;
  if (!(socket.timeout! > 0) || socket.timeout! > UPSTREAM_IDLE_MS) socket.setTimeout(UPSTREAM_IDLE_MS);
  return true;
}

/**
 * The only client headers an upstream is sent: what it needs to read the body and shape the reply,
 * and the W3C trace context (with tracing on, the gateway's own upstream span in `traceparent`).
 * Everything else (credentials, cookies, hop-by-hop headers, whatever a client adds) stays here.
 */
export const FORWARDED: ReadonlySet<string> = new Set(['content-type', 'accept', 'traceparent', 'tracestate']);

export class Upstreams {
  // Every request's path is made here, joined to its target's (upstreamPath): http-proxy-3 sends it as it is.
  private readonly proxy = createProxyServer({ prependPath: false, toProxy: true });
  private readonly agents = new Map<string, http.Agent>();
  private readonly targets = new Map<string, Target>();
  /** Health and protection of every upstream, and the pick of one of a model's pool. */
  readonly pools: Pools;
  private stopProbes = (): void => undefined;

  /** `shared`: the upstream limits every instance on one Redis shares (src/proxy/shared-limits.ts); without it each process holds its own. */
  constructor(private readonly configs: ReadonlyMap<string, UpstreamConfig>, private readonly simUrls: ReadonlyMap<string, string>, readonly maxAttempts = 3, shared?: SharedLimits) {
    this.pools = new Pools(configs, Date.now, shared);
    // With selfHandleResponse the proxy hands each upstream response to its request's adapter.
    this.proxy.on('proxyRes', (proxyRes: http.IncomingMessage, _req: unknown, res: EventEmitter) => res.emit('proxyRes', proxyRes));
    // The outgoing request, once it has a socket: whether it was written decides whether a failure may be retried.
    this.proxy.on('proxyReq', (proxyReq: http.ClientRequest, _req: unknown, res: unknown) => { (res as AdaptedResponse).outgoing = proxyReq; });
  }

  baseUrl(name: string): string {
    const u = this.configs.get(name);
    const url = u?.baseUrl ?? this.simUrls.get(name);
    if (!url) throw new Error(`upstream ${name} has no address`);
    return url;
  }

  config(name: string): UpstreamConfig {
    const u = this.configs.get(name);
    if (!u) throw new Error(`no upstream ${name}`);
    return u;
  }

  /** The upstream's address, parsed once (http-proxy-3 would parse a string on every request), with its path and query. */
  private target(name: string): Target {
    let t = this.targets.get(name);
    if (!t) {
      const url = new URL(this.baseUrl(name));
      t = { url, path: url.pathname.replace(/\/+$/, ''), query: url.search.slice(1) };
      this.targets.set(name, t);
    }
    return t;
  }

  /** The upstream's keep-alive agent: TLS for an `https://` base URL, its certificate checked against the CAs Node trusts. */
  private agent(name: string): http.Agent {
    let a = this.agents.get(name);
    if (!a) {
      const o = { keepAlive: true, maxFreeSockets: 256, scheduling: 'lifo' } as const;
      a = this.target(name).url.protocol === 'https:' ? new HttpsUpstreamAgent(o) : new HttpUpstreamAgent(o);
      this.agents.set(name, a);
    }
    return a;
  }

  /** Sends `body` to `path` on the upstream; the response is handed back unread (selfHandleResponse). */
  call(name: string, method: string, path: string, clientHeaders: Record<string, string>, body: Buffer | StreamedBody, requestId: string, timeoutMs?: number): UpstreamCall {
    const cfg = this.config(name);
    // ElevenLabs' own API has none of the OpenAI-compatible contracts: an OpenAI-shaped route never reaches it.
    if (cfg.protocol === 'elevenlabs' && !ELEVENLABS_PATH.test(path)) throw notOnElevenLabs(name);
    const headers: http.OutgoingHttpHeaders = {};
    for (const k of FORWARDED) { const v = clientHeaders[k]; if (v !== undefined) headers[k] = v; }
    const extra = cfg.forwardHeaders;
    if (extra.names.length > 0 || extra.prefixes.length > 0) {
      for (const k in clientHeaders) if (extra.names.includes(k) || extra.prefixes.some((p) => k.startsWith(p))) headers[k] = clientHeaders[k];
    }
    headers['content-length'] = String(body.length);
    const source = Buffer.isBuffer(body) ? new BodySource(body) : body.stream;
    headers['x-request-id'] = requestId;
    // ElevenLabs takes its key in xi-api-key (its OpenAPI spec, every operation); the OpenAI-compatible contracts as a bearer token.
    if (cfg.apiKeyEnv) {
      const secret = process.env[cfg.apiKeyEnv] ?? '';
      if (cfg.protocol === 'elevenlabs') headers['xi-api-key'] = secret;
      else headers.authorization = `Bearer ${secret}`;
    }
    const target = this.target(name);
    const req = new AdaptedRequest(method, upstreamPath(target, path), headers);
    const call = new ProxiedCall();
    // A streamed body that fails to read (the store) ends the upstream request: it never waits for the rest.
    if (!Buffer.isBuffer(body)) body.stream.once('error', () => call.cut());
    call.response = new Promise<http.IncomingMessage>((resolve, reject) => {
      const res = call.res;
      call.timer = setTimeout(() => { call.timedOut = true; call.cut(); reject(upstreamTimeout(cfg.timeoutMs)); }, timeoutMs ?? cfg.timeoutMs);
      res.once('proxyRes', (proxyRes: http.IncomingMessage) => {
        clearTimeout(call.timer);
        resolve(proxyRes);
      });
      this.proxy.web(req as unknown as http.IncomingMessage, res as unknown as http.ServerResponse, {
        target: target.url, buffer: source as unknown as Stream, selfHandleResponse: true,
        changeOrigin: true, agent: this.agent(name),
      }, (err: Error) => {
        clearTimeout(call.timer);
        // Our own abort destroys the upstream request, which ends here too: that is neither the host's fault nor news.
        if (call.clientGone) { reject(clientClosed()); return; }
        if (!call.timedOut) log('warn', 'upstream unreachable', { request_id: requestId, upstream: name, error: (err as { code?: string }).code ?? err.message });
        reject(call.timedOut ? upstreamTimeout(cfg.timeoutMs) : upstreamUnavailable(err));
      });
    });
    call.response.catch(() => undefined);
    return call;
  }

  /** The active health probe: a GET of `path` (unbilled, never a generation); true when the upstream answers below 500 in time. */
  probe(name: string, path: string): Promise<boolean> {
    const cfg = this.config(name);
    const t = this.target(name);
    const url = new URL(`${t.path}${path}`, t.url);
    const headers: http.OutgoingHttpHeaders = cfg.apiKeyEnv ? { authorization: `Bearer ${process.env[cfg.apiKeyEnv] ?? ''}` } : {};
    return new Promise((resolve) => {
      const req = (url.protocol === 'https:' ? https : http).get(url, { agent: this.agent(name), headers, timeout: Math.min(cfg.timeoutMs, 5000) }, (res) => {
        res.resume();
        res.once('end', () => resolve((res.statusCode ?? 500) < 500));
        res.once('error', () => resolve(false));
      });
      req.once('timeout', () => req.destroy(new Error('probe timed out')));
      req.once('error', () => resolve(false));
    });
  }

  /** Sends the request to a model's pool under the retry rule (src/proxy/routed.ts); `finish` frees the upstream's slot. */
  route(spec: Omit<RouteSpec, 'maxAttempts'>): RoutedCall {
    return routeCall(this, this.pools, { ...spec, maxAttempts: this.maxAttempts });
  }

  /** Starts the active health probes of the upstreams that share a pool. */
  startProbes(models: readonly ModelConfig[]): void {
    this.stopProbes();
    this.stopProbes = startProbes(this, models);
  }

  close(): void {
    this.stopProbes();
    for (const a of this.agents.values()) a.destroy();
    this.proxy.close();
  }
}

/** The paths of ElevenLabs' API that Tollgate calls (the beta family's speech and voices). */
const ELEVENLABS_PATH = /^\/v1\/(text-to-speech|speech-to-speech|speech-to-text|voices)(\/|\?|$)/;

function notOnElevenLabs(name: string): GatewayError {
  return new GatewayError({ status: 400, code: 'not_offered',
    message: `This model is served by ElevenLabs' own API (upstream ${name}): only the ElevenLabs-shaped routes under /beta reach it. Nothing was billed.` });
}

export function upstreamTimeout(ms: number): GatewayError {
  return new GatewayError({ code: 'upstream_timeout', retryable: true,
    message: `The model host did not answer within ${ms} ms. Nothing was billed.` });
}

export function upstreamUnavailable(err: Error): GatewayError {
  const code = (err as { code?: string }).code;
  return new GatewayError({ code: 'upstream_unavailable', retryable: true,
    message: `The model host could not be reached${code ? ` (${code})` : ''}. Nothing was billed.` });
}

export function upstreamFailed(status: number): GatewayError {
  return new GatewayError({ code: 'upstream_error', retryable: status >= 500,
    message: `The model host failed (status ${status}). Nothing was billed.` });
}

export function upstreamMalformed(): GatewayError {
  return new GatewayError({ code: 'upstream_malformed_response', retryable: true,
    message: 'The model host sent a response that could not be read. Nothing was billed.' });
}

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


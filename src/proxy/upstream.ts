// http-proxy-3 driven from uWS: a small request/response adapter, keep-alive agents, and fault mapping.
import http from 'node:http';
import { EventEmitter } from 'node:events';
import type { Readable, Stream } from 'node:stream';
import { createProxyServer } from 'http-proxy-3';
import { GatewayError, clientClosed } from '../errors.js';
import type { UpstreamConfig } from '../config.js';
import { log } from '../observe/log.js';

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
  constructor(private readonly body: Buffer) {}
  pipe<T extends NodeJS.WritableStream>(dest: T): T { dest.end(this.body); return dest; }
}

/** A body sent as it is read (never whole in memory), of a length known in advance. */
export interface StreamedBody {
  length: number;
  stream: Readable;
}

/** What it reads from the response: `close` (the client left: it destroys the upstream request) and state flags. */
class AdaptedResponse extends EventEmitter {
  writableFinished = false;
  headersSent = false;
  finished = false;
}

export interface UpstreamCall {
  response: Promise<http.IncomingMessage>;
  /** Stops the upstream request (client gone or timeout); the upstream sees its socket close. */
  abort(): void;
}

/**
 * The only client headers an upstream is sent: what it needs to read the body and shape the reply.
 * Everything else (credentials, cookies, hop-by-hop headers, whatever a client adds) stays here.
 */
export const FORWARDED: ReadonlySet<string> = new Set(['content-type', 'accept']);

export class Upstreams {
  private readonly proxy = createProxyServer({});
  private readonly agents = new Map<string, http.Agent>();
  private readonly targets = new Map<string, URL>();

  constructor(private readonly configs: ReadonlyMap<string, UpstreamConfig>, private readonly simUrls: ReadonlyMap<string, string>) {
    // With selfHandleResponse the proxy hands each upstream response to its request's adapter.
    this.proxy.on('proxyRes', (proxyRes: http.IncomingMessage, _req: unknown, res: EventEmitter) => res.emit('proxyRes', proxyRes));
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

  /** The upstream's address, parsed once (http-proxy-3 would parse a string on every request). */
  private target(name: string): URL {
    let t = this.targets.get(name);
    if (!t) { t = new URL(this.baseUrl(name)); this.targets.set(name, t); }
    return t;
  }

  private agent(name: string): http.Agent {
    let a = this.agents.get(name);
    if (!a) { a = new http.Agent({ keepAlive: true, maxFreeSockets: 256, scheduling: 'lifo' }); this.agents.set(name, a); }
    return a;
  }

  /** Sends `body` to `path` on the upstream; the response is handed back unread (selfHandleResponse). */
  call(name: string, method: string, path: string, clientHeaders: Record<string, string>, body: Buffer | StreamedBody, requestId: string, timeoutMs?: number): UpstreamCall {
    const cfg = this.config(name);
    const headers: http.OutgoingHttpHeaders = {};
    for (const k of FORWARDED) { const v = clientHeaders[k]; if (v !== undefined) headers[k] = v; }
    const extra = cfg.forwardHeaders;
    if (extra.names.length > 0 || extra.prefixes.length > 0) {
      for (const k in clientHeaders) if (extra.names.includes(k) || extra.prefixes.some((p) => k.startsWith(p))) headers[k] = clientHeaders[k];
    }
    headers['content-length'] = String(body.length);
    const source = Buffer.isBuffer(body) ? new BodySource(body) : body.stream;
    headers['x-request-id'] = requestId;
    if (cfg.apiKeyEnv) headers.authorization = `Bearer ${process.env[cfg.apiKeyEnv] ?? ''}`;
    const req = new AdaptedRequest(method, path, headers);
    const res = new AdaptedResponse();
    let timedOut = false;
    let clientGone = false;
    let timer: NodeJS.Timeout | undefined;
    const abort = () => { if (!res.writableFinished) res.emit('close'); };
    // A streamed body that fails to read (the store) ends the upstream request: it never waits for the rest.
    if (!Buffer.isBuffer(body)) body.stream.once('error', abort);
    const response = new Promise<http.IncomingMessage>((resolve, reject) => {
      timer = setTimeout(() => { timedOut = true; abort(); reject(upstreamTimeout(cfg.timeoutMs)); }, timeoutMs ?? cfg.timeoutMs);
      res.once('proxyRes', (proxyRes: http.IncomingMessage) => {
        clearTimeout(timer);
        resolve(proxyRes);
      });
      this.proxy.web(req as unknown as http.IncomingMessage, res as unknown as http.ServerResponse, {
        target: this.target(name), buffer: source as unknown as Stream, selfHandleResponse: true,
        changeOrigin: true, agent: this.agent(name),
      }, (err: Error) => {
        clearTimeout(timer);
        // Our own abort destroys the upstream request, which ends here too: that is neither the host's fault nor news.
        if (clientGone) { reject(clientClosed()); return; }
        if (!timedOut) log('warn', 'upstream unreachable', { request_id: requestId, upstream: name, error: (err as { code?: string }).code ?? err.message });
        reject(timedOut ? upstreamTimeout(cfg.timeoutMs) : upstreamUnavailable(err));
      });
    });
    response.catch(() => undefined);
    return { response, abort: () => { clientGone = true; clearTimeout(timer); abort(); } };
  }

  close(): void {
    for (const a of this.agents.values()) a.destroy();
    this.proxy.close();
  }
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


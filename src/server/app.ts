// The front end: uWS serves the mounted routes, authenticates keys, admits unbilled requests, and drains on shutdown.
import uWS from '@trufflesuite/uws-js-unofficial';
import type { Config } from '../config.js';
import { GatewayError, internalError, notFound, type ErrorRenderer } from '../errors.js';
import type { StateCache } from '../gate/cache.js';
import { authenticate, requireScope } from '../gate/auth.js';
import { admit, type AdmissionDeps, type Hold } from '../gate/admission.js';
import type { Metrics } from '../observe/metrics.js';
import { log, requestLoggingEnabled } from '../observe/log.js';
import { base62 } from '../store/ids.js';
import { Ctx } from './context.js';
import { readBody } from './body.js';
import { Router, methodNotAllowed, type Match, type Mount } from './router.js';

/** What the front end needs of the stages: keys to authenticate, admission for unbilled requests, metrics. */
export interface FrontEndDeps { config: Config; cache: StateCache; admission: AdmissionDeps; metrics: Metrics }

/** The URL clients use: `public_url`, else the listen host (bracketed if IPv6) and the bound port. */
export function baseUrlOf(config: Config, port: number): string {
  const host = config.listen.host.includes(':') ? `[${config.listen.host}]` : config.listen.host;
  return config.publicUrl ?? `http://${host}:${port}`;
}

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
/** More header bytes than any client of ours sends: refused with 431 before anything else is done. */
export const MAX_HEADER_BYTES = 16 * 1024;

export class Gateway {
  port = 0;
  private listenSocket: uWS.us_listen_socket | null = null;
  private readonly inFlight = new Set<Ctx>();
  private readonly router: Router;
  private draining = false;

  constructor(private readonly s: FrontEndDeps, mounts: Mount[], fallback: ErrorRenderer) {
    this.router = new Router(mounts, fallback);
    s.metrics.inFlight = () => this.inFlight.size;
  }

  async listen(): Promise<void> {
    const c = this.s.config;
    const app = uWS.App();
    app.any('/*', (res, req) => this.onRequest(res, req));
    await new Promise<void>((resolve, reject) => {
      app.listen(c.listen.host, c.listen.port, (sock) => {
        if (!sock) { reject(new Error(`cannot listen on ${c.listen.host}:${c.listen.port}`)); return; }
        this.listenSocket = sock;
        this.port = uWS.us_socket_local_port(sock);
        resolve();
      });
    });
  }

  get baseUrl(): string {
    return baseUrlOf(this.s.config, this.port);
  }

  private onRequest(res: uWS.HttpResponse, req: uWS.HttpRequest): void {
    const ctx = new Ctx(res, req);
    const m = this.router.match(ctx.method, ctx.path);
    ctx.family = m.family;
    let body: Promise<Buffer> | null = null;
    if ('route' in m && BODY_METHODS.has(ctx.method)) {
      body = readBody(ctx, m.route.bodyLimit ?? this.s.config.limits.maxBodyBytes);
      body.catch(() => undefined);
    } else if (BODY_METHODS.has(ctx.method)) {
      res.onData(() => undefined);
    }
    this.inFlight.add(ctx);
    void this.dispatch(ctx, m, body).finally(() => this.finish(ctx));
  }

  private async dispatch(ctx: Ctx, m: Match, body: Promise<Buffer> | null): Promise<void> {
    let hold: Hold | null = null;
    try {
      if (this.draining) throw new GatewayError({ status: 503, code: 'shutting_down', type: 'server_error', retryable: true, message: 'This instance is shutting down; retry.' });
      if (ctx.headerBytes > MAX_HEADER_BYTES) {
        throw new GatewayError({ status: 431, code: 'headers_too_large', message: `The request's headers are larger than ${MAX_HEADER_BYTES} bytes.` });
      }
      if ('allowed' in m) throw methodNotAllowed(ctx.method, m.allowed);
      if (!('route' in m)) throw notFound(ctx.path);
      const { route, params } = m;
      ctx.routeName = route.name;
      if (route.scope !== 'public') {
        ctx.key = await authenticate(this.s.cache, ctx.headers);
        if (route.scope !== 'any') requireScope(ctx.key, route.scope);
        // Every request with a key counts against its rpm and takes an in-flight slot; a metered
        // route admits itself, with its balance and ceiling checks and its hold.
        if (!route.metered) hold = await admit(this.s.admission, ctx.key, `${ctx.requestId}/${base62(8)}`, 0n, false);
      }
      await route.handler(ctx, { params, body: body ? await body : null });
    } catch (e) {
      if (e instanceof GatewayError) {
        if (e.status !== 499) ctx.fail(e);
      } else {
        log('error', 'unhandled error', { request_id: ctx.requestId, route: ctx.routeName, error: String((e as Error)?.stack ?? e) });
        ctx.fail(internalError());
      }
    } finally {
      if (hold) void hold.release();
    }
  }

  private finish(ctx: Ctx): void {
    this.inFlight.delete(ctx);
    if (!ctx.finished && !ctx.aborted) ctx.close();
    const ms = ctx.elapsedMs();
    const status = ctx.aborted && !ctx.finished ? 499 : ctx.status;
    this.s.metrics.request(ctx.routeName, status, ms, Number(ctx.upstreamNs) / 1e6);
    if (requestLoggingEnabled()) {
      log('info', 'request', { request_id: ctx.requestId, method: ctx.method, path: ctx.path, status, ms: Math.round(ms * 1000) / 1000,
        upstream_ms: Math.round(Number(ctx.upstreamNs) / 1e3) / 1e3, key: ctx.key?.prefix });
    }
  }

  /** Stops accepting and lets in-flight requests finish (their debits are then the stages' to commit). */
  async stop(drainMs = 30_000): Promise<void> {
    this.draining = true;
    if (this.listenSocket) { uWS.us_listen_socket_close(this.listenSocket); this.listenSocket = null; }
    const deadline = Date.now() + drainMs;
    while (this.inFlight.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  }
}

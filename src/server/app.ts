// The gateway behind a front end (uWS or node:http, io.ts): serves the mounted routes, authenticates keys, admits unbilled requests, and drains on shutdown.
import { baseUrlOf, type Config } from '../config.js';
import { CLOSE, GatewayError, internalError, limitsUnavailable, notFound, storeUnavailable, type ErrorRenderer } from '../errors.js';
import type { StateCache } from '../gate/cache.js';
import { authenticate, authenticateKey, invalidKey, requireScope } from '../gate/auth.js';
import { admit, type AdmissionDeps, type Hold } from '../gate/admission.js';
import type { Metrics } from '../observe/metrics.js';
import { log, requestLoggingEnabled } from '../observe/log.js';
import { base62, newId } from '../store/ids.js';
import { Ctx } from './context.js';
import { readBody, streamBody, type BodyStream } from './body.js';
import { Router, methodNotAllowed, type Match, type Mount } from './router.js';
import { Session, refuseUpgrade, transportFrameLimit, upgradeKey, type UpgradeRequest } from './ws.js';
import type { FrontEnd, FrontEndHost, HttpIn, HttpOut, Listener, SocketIO, UpgradeOut } from './io.js';
import type { KeyRecord } from '../store/keys.js';
import type { Availability } from '../observe/availability.js';
import type { HealthMonitor } from '../observe/health.js';
import { RequestTrace, operationOf, type OtlpExporter } from '../observe/trace.js';

/** What the front end needs of the stages: keys to authenticate, admission for unbilled requests, metrics. */
export interface FrontEndDeps {
  config: Config; cache: StateCache; admission: AdmissionDeps; metrics: Metrics;
  /** Status: traffic counts per area, the stores' state (a 401 or 402 becomes a 503 while one is down), and traces when configured. */
  availability?: Availability; health?: HealthMonitor; tracer?: OtlpExporter | null;
}

/**
 * While a store is down, an answer about the key or the money cannot be trusted: a 401 or 402 is
 * answered as the outage it may be (503 with Retry-After), so no user debugs their key during ours.
 */
export function duringOutage(e: GatewayError, health: HealthMonitor | undefined): GatewayError {
  if (e.status !== 401 && e.status !== 402) return e;
  const down = health?.storeDown();
  if (!down) return e;
  return down === 'redis' ? limitsUnavailable() : storeUnavailable();
}

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
/** More header bytes than any client of ours sends: refused with 431 before anything else is done. */
export const MAX_HEADER_BYTES = 16 * 1024;

export class Gateway implements FrontEndHost {
  port = 0;
  private listener: Listener | null = null;
  private readonly inFlight = new Set<Ctx>();
  /** Open WebSocket sessions: each holds its concurrency slot until it closes. */
  private readonly sessions = new Set<Session>();
  private readonly router: Router;
  private draining = false;

  constructor(private readonly s: FrontEndDeps, mounts: Mount[], fallback: ErrorRenderer, readonly frontEnd: FrontEnd) {
    this.router = new Router(mounts, fallback);
    s.metrics.inFlight = () => this.inFlight.size;
    s.metrics.frontEnd = frontEnd.name;
  }

  async listen(): Promise<void> {
    const c = this.s.config;
    this.listener = await this.frontEnd.listen(this, c.listen.host, c.listen.port);
    this.port = this.listener.port;
  }

  /** The front end's frame limit: above every route's own, so a frame past a route's limit is closed with 1009 by `message` (ws.ts). */
  get maxSocketMessage(): number {
    return transportFrameLimit(this.router.maxSocketMessage);
  }

  opened(session: Session, socket: SocketIO): void {
    session.ws = socket;
    this.sessions.add(session);
    session.handler?.opened?.();
  }

  message(session: Session, data: Buffer, isBinary: boolean): void {
    if (data.byteLength > session.route.maxMessageBytes) {
      session.close(CLOSE.TOO_BIG, `a message may have at most ${session.route.maxMessageBytes} bytes`);
      return;
    }
    session.enqueue(data, isBinary);
  }

  drained(session: Session): void {
    session.drained();
  }

  closed(session: Session, code: number): void {
    session.onClosed();
    this.sessions.delete(session);
    void Promise.resolve(session.handler?.closed(code)).catch((e: unknown) => {
      log('error', 'session close handler failed', { session: session.id, error: String((e as Error)?.stack ?? e) });
    });
  }

  get baseUrl(): string {
    return baseUrlOf(this.s.config, this.port);
  }

  request(res: HttpOut, req: HttpIn): void {
    const ctx = new Ctx(res, req);
    const m = this.router.match(ctx.method, ctx.path);
    ctx.family = m.family;
    let body: Promise<Buffer> | null = null;
    let stream: BodyStream | null = null;
    if ('route' in m && BODY_METHODS.has(ctx.method)) {
      const limit = m.route.bodyLimit ?? this.s.config.limits.maxBodyBytes;
      if (m.route.body === 'stream') {
        stream = streamBody(ctx, limit);
        stream.on('error', () => undefined); // the handler sees the error where it reads
      } else {
        body = readBody(ctx, limit);
        body.catch(() => undefined);
      }
    } else if (BODY_METHODS.has(ctx.method)) {
      res.onData(() => undefined);
    }
    this.inFlight.add(ctx);
    void this.dispatch(ctx, m, body, stream).finally(() => {
      // A body the handler did not read to the end (a refusal, an error) is discarded, not left paused.
      if (stream && !stream.readableEnded) stream.destroy();
      this.finish(ctx);
    });
  }

  private async dispatch(ctx: Ctx, m: Match, body: Promise<Buffer> | null, stream: BodyStream | null): Promise<void> {
    let hold: Hold | null = null;
    const tracer = this.s.tracer;
    if (tracer) {
      const t = ctx.trace = new RequestTrace(ctx.headers.traceparent);
      // The upstream is sent this trace's context (proxy/upstream.ts forwards traceparent).
      ctx.headers.traceparent = t.outgoing;
      t.attrs['http.request.method'] = ctx.method;
      t.attrs['url.path'] = ctx.path;
      t.attrs['tollgate.request_id'] = ctx.requestId;
      t.attrs['tollgate.span_name'] = `${ctx.method} ${'route' in m ? m.route.path : 'unmatched'}`;
      if ('route' in m) { t.attrs['http.route'] = m.route.path; t.attrs['gen_ai.operation.name'] = operationOf(m.route.name); }
    }
    try {
      if (this.draining) throw new GatewayError({ code: 'shutting_down', retryable: true, message: 'This instance is shutting down; retry.' });
      if (ctx.headerBytes > MAX_HEADER_BYTES) {
        throw new GatewayError({ code: 'headers_too_large', message: `The request's headers are larger than ${MAX_HEADER_BYTES} bytes.` });
      }
      if ('allowed' in m) throw methodNotAllowed(ctx.method, m.allowed);
      if (!('route' in m)) throw notFound(ctx.path);
      const { route, params } = m;
      ctx.routeName = route.name;
      if (route.scope !== 'public') {
        try {
          ctx.key = await authenticate(this.s.cache, ctx.headers);
        } catch (e) {
          if (e instanceof GatewayError && e.status >= 500) this.s.availability?.record('authentication', e.status);
          throw e;
        }
        this.s.availability?.record('authentication', 200);
        ctx.trace?.stage('tollgate.auth', { 'tollgate.key_prefix': ctx.key.prefix });
        if (route.scope !== 'any') requireScope(ctx.key, route.scope);
        // Every request with a key counts against its rpm and takes an in-flight slot; a metered
        // route admits itself, with its balance and ceiling checks and its hold.
        if (!route.metered) {
          hold = await admit(this.s.admission, ctx.key, `${ctx.requestId}/${base62(8)}`, 0n, false);
          ctx.rateHeaders = hold.rateHeaders;
        }
      }
      // This frame waits as long as the reply runs: it hands the body on and keeps no reference to it.
      let whole = body ? await body : null;
      body = null;
      const handled = route.handler(ctx, { params, body: whole, stream });
      whole = null;
      await handled;
    } catch (e) {
      // What the client still sends of a refused body is read and dropped (not left paused mid-upload).
      if (stream && !stream.readableEnded) stream.discard();
      if (e instanceof GatewayError) {
        if (e.status !== 499) ctx.fail(duringOutage(e, this.s.health));
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
    const av = this.s.availability;
    if (av && status !== 499) {
      const now = Date.now();
      const fam = (ctx.family as { name?: string }).name;
      if (fam === 'alpha' || fam === 'beta') av.record(fam, status, now);
      if (ctx.routeName.startsWith('svc.billing')) av.record('payments', status, now);
      // Admission's answer: a keyed request that ran, or failed because the limiter or store could not be asked.
      if (ctx.errorCode === 'limits_unavailable' || (ctx.errorCode === 'store_unavailable' && ctx.key)) av.record('ledger', 503, now);
      else if (ctx.key && status < 400) av.record('ledger', status, now);
    }
    if (ctx.trace) this.s.tracer?.end(ctx.trace, status);
    if (requestLoggingEnabled()) {
      log('info', 'request', { request_id: ctx.requestId, method: ctx.method, path: ctx.path, status, ms: Math.round(ms * 1000) / 1000,
        upstream_ms: Math.round(Number(ctx.upstreamNs) / 1e3) / 1e3, key: ctx.key?.prefix });
    }
  }

  /**
   * An upgrade on a WebSocket route: the key (headers, or where the route allows it), the scope and the
   * route's admission run before the upgrade, and a refusal is an HTTP error in the family's envelope.
   */
  upgrade(res: UpgradeOut, req: HttpIn, accept: (session: Session, protocol: string) => void): void {
    const path = req.getUrl();
    const headers: Record<string, string> = {};
    let headerBytes = 0;
    req.forEach((k, v) => { headerBytes += k.length + v.length + 4; headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`; });
    const protocols = (headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim()).filter(Boolean);
    const query = new URLSearchParams(req.getQuery() ?? '');
    const given = headers['x-request-id'];
    const requestId = given && /^[A-Za-z0-9._:-]{8,128}$/.test(given) ? given : newId('req');
    let aborted = false;
    res.onAborted(() => { aborted = true; });
    const m = this.router.matchSocket(path);
    if (!m) {
      // Not a WebSocket route: HTTP routes and errors answer as usual (an upgrade on an HTTP path is a 404 there).
      refuseUpgrade(res, notFound(path), this.router.familyOf(path), requestId);
      return;
    }
    const { route, family, params } = m;
    const up: UpgradeRequest = { path, query, headers, params, requestId, protocols };
    void (async () => {
      const session = new Session(route);
      try {
        if (this.draining) throw new GatewayError({ code: 'shutting_down', retryable: true, message: 'This instance is shutting down; retry.' });
        if (headerBytes > MAX_HEADER_BYTES) throw new GatewayError({ code: 'headers_too_large', message: `The request's headers are larger than ${MAX_HEADER_BYTES} bytes.` });
        const presented = upgradeKey(route, up);
        let key: KeyRecord | null = null;
        if (presented !== null) key = (await route.authenticate?.(presented)) ?? await authenticateKey(this.s.cache, presented);
        else if (!route.keyInFirstFrame) throw invalidKey('No API key provided. Send it as `Authorization: Bearer svc_live_...` or in the `xi-api-key` header.');
        if (key) requireScope(key, route.scope);
        const handler = await route.accept(up, key, session);
        if (aborted) { await handler.closed(1006); return; }
        session.handler = handler;
        // The subprotocol answered: the first one offered that does not carry a key.
        const echo = protocols.find((p) => !(route.keyFrom?.protocolPrefixes ?? []).some((x) => p.startsWith(x))) ?? '';
        accept(session, echo);
      } catch (e) {
        if (aborted) return;
        if (e instanceof GatewayError) refuseUpgrade(res, duringOutage(e, this.s.health), family, requestId);
        else {
          log('error', 'unhandled error', { request_id: requestId, route: route.name, error: String((e as Error)?.stack ?? e) });
          refuseUpgrade(res, internalError(), family, requestId);
        }
      }
    })();
  }

  /** Stops accepting and lets in-flight requests finish (their debits are then the stages' to commit). */
  async stop(drainMs = 30_000): Promise<void> {
    this.draining = true;
    if (this.s.health) this.s.health.draining = true;
    this.listener?.close();
    this.listener = null;
    // Sessions finish what is under way, settle, and close with 1001 (going away).
    await Promise.all([...this.sessions].map((x) => x.handler?.shutdown().catch(() => undefined)));
    const deadline = Date.now() + drainMs;
    while (this.inFlight.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  }
}

// The gateway process: wires the stages together, serves them on uWS, and drains on shutdown.
import { EventEmitter } from 'node:events';
import uWS from '@trufflesuite/uws-js-unofficial';
import type { Config } from '../config.js';
import { GatewayError, internalError, notFound } from '../errors.js';
import { openPglite, openPostgres, type Db } from '../store/db.js';
import { StateCache } from '../gate/cache.js';
import { MemoryLimiter } from '../gate/limits/memory.js';
import { RedisLimiter } from '../gate/limits/redis.js';
import type { Limiter } from '../gate/limits/types.js';
import { authenticate, requireScope } from '../gate/auth.js';
import type { AdmissionDeps } from '../gate/admission.js';
import { Settler } from '../ledger/settle.js';
import { ModelRegistry } from '../resolve/models.js';
import { Upstreams } from '../proxy/upstream.js';
import { startSim, type SimHandle } from '../sim/index.js';
import { Ctx } from './context.js';
import { readBody } from './body.js';
import { Metrics } from './metrics.js';
import { Router, canonicalPath, methodNotAllowed } from './router.js';
import { log, requestLoggingEnabled } from './log.js';
import { routes } from './routes.js';

export interface Services {
  config: Config;
  /** 'balance' (accountId: string, balance: bigint) after every committed ledger change seen by this instance. */
  events: EventEmitter;
  db: Db;
  cache: StateCache;
  limiter: Limiter;
  settler: Settler;
  metrics: Metrics;
  models: ModelRegistry;
  upstreams: Upstreams;
  admission: AdmissionDeps;
}

export interface GatewayOptions { dataDir: string }

/** The URL clients use: `public_url`, else the listen host (bracketed if IPv6) and the bound port. */
export function baseUrlOf(config: Config, port: number): string {
  const host = config.listen.host.includes(':') ? `[${config.listen.host}]` : config.listen.host;
  return config.publicUrl ?? `http://${host}:${port}`;
}

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export class Gateway {
  services!: Services;
  port = 0;
  private listenSocket: uWS.us_listen_socket | null = null;
  private readonly inFlight = new Set<Ctx>();
  private sims: SimHandle[] = [];
  private router!: Router;
  private draining = false;

  constructor(private readonly config: Config, private readonly opts: GatewayOptions) {}

  async start(): Promise<void> {
    const c = this.config;
    const db = c.databaseUrl ? await openPostgres(c.databaseUrl, c.poolSize) : await openPglite(this.opts.dataDir);
    const cache = new StateCache(db);
    await cache.init();
    cache.start();
    let limiter: Limiter;
    if (c.redisUrl) {
      const r = new RedisLimiter(c.redisUrl, c.redisPrefix);
      await r.ready();
      limiter = r;
    } else limiter = new MemoryLimiter();
    const metrics = new Metrics();
    const events = new EventEmitter();
    const settler = new Settler(db, {
      balance: (id, bal, v) => { cache.balance(id, bal, v); events.emit('balance', id, bal); },
      spend: (k, p, st, sp, v) => cache.spend(k, p, st, sp, v),
    });
    metrics.ledgerWrites = () => settler.writes;
    metrics.inFlight = () => this.inFlight.size;
    const simUrls = new Map<string, string>();
    for (const [name, u] of c.upstreams) {
      if (!u.sim) continue;
      const sim = await startSim({ host: '127.0.0.1', port: 0, tokenDelayMs: u.sim.tokenDelayMs });
      this.sims.push(sim);
      simUrls.set(name, sim.url);
    }
    const maxTimeout = Math.max(...[...c.upstreams.values()].map((u) => u.timeoutMs));
    this.services = {
      config: c, events, db, cache, limiter, settler, metrics,
      models: new ModelRegistry(c.models),
      upstreams: new Upstreams(c.upstreams, simUrls),
      admission: { cache, limiter, metrics, defaultRpm: c.limits.defaultRpm, defaultConcurrency: c.limits.defaultConcurrency, holdTtlMs: maxTimeout + 60_000, openHolds: { count: 0, releasing: new Set() } },
    };
    metrics.openHolds = () => this.services.admission.openHolds.count;
    this.router = new Router(routes(this.services, this));
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
    return baseUrlOf(this.config, this.port);
  }

  private onRequest(res: uWS.HttpResponse, req: uWS.HttpRequest): void {
    const ctx = new Ctx(res, req);
    const path = canonicalPath(ctx.path);
    ctx.path = path;
    const m = this.router.match(ctx.method, path);
    let body: Promise<Buffer> | null = null;
    if (m && 'route' in m && BODY_METHODS.has(ctx.method)) {
      body = readBody(ctx, m.route.bodyLimit ?? this.config.limits.maxBodyBytes);
      body.catch(() => undefined);
    } else if (BODY_METHODS.has(ctx.method)) {
      res.onData(() => undefined);
    }
    this.inFlight.add(ctx);
    void this.dispatch(ctx, m, body).finally(() => this.finish(ctx));
  }

  private async dispatch(ctx: Ctx, m: ReturnType<Router['match']>, body: Promise<Buffer> | null): Promise<void> {
    try {
      if (this.draining) throw new GatewayError({ status: 503, code: 'shutting_down', type: 'server_error', retryable: true, message: 'This instance is shutting down; retry.' });
      if (!m) throw notFound(ctx.path);
      if ('allowed' in m) throw methodNotAllowed(ctx.method, m.allowed);
      const { route, params } = m;
      ctx.routeName = route.name;
      if (route.scope !== 'public') {
        ctx.key = await authenticate(this.services.cache, ctx.headers);
        if (route.scope !== 'any') requireScope(ctx.key, route.scope);
      }
      await route.handler(ctx, { params, body: body ? await body : null });
    } catch (e) {
      if (e instanceof GatewayError) {
        if (e.status !== 499) ctx.fail(e);
      } else {
        log('error', 'unhandled error', { request_id: ctx.requestId, route: ctx.routeName, error: String((e as Error)?.stack ?? e) });
        ctx.fail(internalError());
      }
    }
  }

  private finish(ctx: Ctx): void {
    this.inFlight.delete(ctx);
    if (!ctx.finished && !ctx.aborted) ctx.close();
    const ms = ctx.elapsedMs();
    const status = ctx.aborted && !ctx.finished ? 499 : ctx.status;
    this.services.metrics.request(ctx.routeName, status, ms, Number(ctx.upstreamNs) / 1e6);
    if (requestLoggingEnabled()) {
      log('info', 'request', { request_id: ctx.requestId, method: ctx.method, path: ctx.path, status, ms: Math.round(ms * 1000) / 1000,
        upstream_ms: Math.round(Number(ctx.upstreamNs) / 1e3) / 1e3, key: ctx.key?.prefix });
    }
  }

  /** Stops accepting, lets in-flight requests finish and settle, then closes the store. */
  async stop(drainMs = 30_000): Promise<void> {
    this.draining = true;
    if (this.listenSocket) { uWS.us_listen_socket_close(this.listenSocket); this.listenSocket = null; }
    const deadline = Date.now() + drainMs;
    while (this.inFlight.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    const s = this.services;
    await s.settler.drain();
    await Promise.all(s.admission.openHolds.releasing);
    s.cache.stop();
    s.upstreams.close();
    await Promise.all(this.sims.map((x) => x.close()));
    await s.limiter.close();
    await s.db.close();
  }
}

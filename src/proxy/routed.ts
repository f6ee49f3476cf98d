// One request over a model's pool: attempts on different upstreams under the retry rule (README "Upstream pools"), one reply handed back.
import type { IncomingMessage } from 'node:http';
import type { PoolEntry } from '../config.js';
import { GatewayError, clientClosed } from '../errors.js';
import { log } from '../observe/log.js';
import type { Pools, Lease } from './pool.js';
import type { StreamedBody, UpstreamCall, Upstreams } from './upstream.js';

export interface RouteSpec {
  pool: readonly PoolEntry[];
  method: string;
  /** The path, or the path on one upstream of the pool (an id only that upstream knows, a cloned voice's, may be in it). */
  path: string | ((entry: PoolEntry) => string);
  headers: Record<string, string>;
  /** The body for one upstream of the pool (its `upstream_model` may differ). A streamed body is sent once: never retried. */
  body(entry: PoolEntry): Buffer | StreamedBody;
  requestId: string;
  maxAttempts: number;
}

/** A pool's call: `entry` is the upstream whose reply `response` is (set once it resolves). */
export interface RoutedCall extends UpstreamCall {
  readonly entry: PoolEntry | undefined;
}

/**
 * Sends the request to the best upstream of the pool and, while no byte has reached the client and the
 * upstream cannot have done the work, to the next: a connect failure before the request was written
 * whole, or a 429/503 reply (nothing generated). Never after a reply starts (this resolves before the
 * relay reads any of it), never on another status, a timeout, or a failure after the request was
 * written; at most `maxAttempts` upstreams, within the first upstream's timeout.
 */
export function routeCall(ups: Upstreams, pools: Pools, spec: RouteSpec): RoutedCall {
  return new PoolCall(ups, pools, spec);
}

/**
 * A class, not an object of closures: one lives as long as each reply (an open stream's included), and
 * the literal, with its getters, was a dictionary-mode object besides its closures (issue 29).
 */
class PoolCall implements RoutedCall {
  readonly response: Promise<IncomingMessage>;
  private current: UpstreamCall | undefined;
  private lease: Lease | undefined;
  private gone = false;
  private answered: PoolEntry | undefined;

  constructor(ups: Upstreams, pools: Pools, spec: RouteSpec) {
    this.response = this.attempts(ups, pools, spec);
    this.response.catch(() => undefined);
  }

  get entry(): PoolEntry | undefined { return this.answered; }
  get written(): boolean { return this.current?.written ?? false; }
  abort(): void { this.gone = true; this.current?.abort(); }
  finish(): void { this.lease?.release(); }

  /**
   * The attempts, one upstream after another. The request's body (through `spec.body`) is kept by this
   * frame alone, which ends once an upstream answers: the reply does not keep it.
   */
  private async attempts(ups: Upstreams, pools: Pools, spec: RouteSpec): Promise<IncomingMessage> {
    const { pool, requestId } = spec;
    const deadline = Date.now() + ups.config(pool[0]!.name).timeoutMs;
    const next = (l: Lease, why: string): void => {
      pools.retried(l.entry.name);
      log('info', 'upstream attempt retried elsewhere', { request_id: requestId, upstream: l.entry.name, reason: why });
      l.release();
    };
    const tried = new Set<string>();
    for (let attempt = 1; ; attempt++) {
      if (this.gone) throw clientClosed();
      this.lease = (await pools.acquire(pool, tried, deadline, () => this.gone).catch((e: unknown) => { if (e instanceof GatewayError) undone.add(e); throw e; })) ?? undefined;
      if (!this.lease) throw new Error('a pool with no upstream to try'); // unreachable: the loop stops before every one is tried
      const l = this.lease;
      tried.add(l.entry.name);
      const body = spec.body(l.entry);
      const again = Buffer.isBuffer(body) && attempt < spec.maxAttempts && tried.size < pool.length;
      const path = typeof spec.path === 'string' ? spec.path : spec.path(l.entry);
      const call = ups.call(l.entry.name, spec.method, path, spec.headers, body, requestId, Math.max(1, deadline - Date.now()));
      this.current = call;
      let res: IncomingMessage;
      try {
        res = await call.response;
      } catch (e) {
        if (this.gone || (e as GatewayError).code === 'client_closed') { l.release(); throw e; }
        l.failed();
        const unsent = e instanceof GatewayError && e.code === 'upstream_unavailable' && !call.written;
        if (again && unsent && Date.now() < deadline) { next(l, `connect failed: ${e.message}`); continue; }
        l.release();
        if (unsent) undone.add(e as GatewayError);
        throw e;
      }
      const status = res.statusCode ?? 502;
      if (status === 429 || status === 503) {
        const wait = retryAfterMs(res);
        if (wait !== undefined) l.pause(wait);
        if (status === 503) l.failed();
        if (again && Date.now() < deadline) { res.resume(); next(l, `status ${status}`); continue; }
      } else if (status >= 500) l.failed();
      else l.ok();
      this.answered = l.entry;
      return res;
    }
  }
}

/** Errors of attempts no upstream can have worked on (busy, not connected, 429/503): a request that opted in may fall back to another model. */
const undone = new WeakSet<GatewayError>();

/** Marks an error as one no upstream worked on (the relay marks a 429/503 reply's error). */
export function markUndone(e: GatewayError): GatewayError { undone.add(e); return e; }

/** No upstream can have done the work that ended in `e`: another model may be tried (opt-in fallback). */
export function wasUndone(e: unknown): boolean { return e instanceof GatewayError && undone.has(e); }

/** An upstream's Retry-After (seconds or an HTTP date) or retry-after-ms, in ms; undefined when absent or unreadable. */
export function retryAfterMs(res: IncomingMessage): number | undefined {
  const ms = Number(res.headers['retry-after-ms']);
  if (Number.isFinite(ms) && ms > 0) return Math.min(ms, 3_600_000);
  const v = res.headers['retry-after'];
  if (typeof v !== 'string' || v === '') return undefined;
  const s = Number(v);
  if (Number.isFinite(s) && s >= 0) return Math.min(s * 1000, 3_600_000);
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.min(Math.max(0, at - Date.now()), 3_600_000);
}

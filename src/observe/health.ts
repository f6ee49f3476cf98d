// The state of what the gateway depends on (PostgreSQL, Redis, payments, upstreams), probed in the background without billing anything.
import { connect } from 'node:net';

export type DependencyState = 'up' | 'down' | 'unknown';

export interface DependencyCheck {
  state: DependencyState;
  /** When the state was last observed (ISO 8601). */
  observedAt: string;
  /** Since when it has been in this state (ISO 8601). */
  since: string;
  detail?: string;
}

/**
 * Upstream health as a plug: today a TCP connect to each configured upstream (no HTTP request, so
 * nothing an upstream could bill); the pool health of issue 27 (passive and active) can stand in for it.
 */
export interface UpstreamHealth {
  /** Every configured upstream, by name, with its state. */
  upstreams(): ReadonlyMap<string, DependencyCheck>;
  /** Refreshes the states (called on every probe tick). */
  refresh(): Promise<void>;
}

export interface HealthProbes {
  postgres: (() => Promise<void>) | null;
  redis: (() => Promise<void>) | null;
  /** The payment provider: null is the sandbox (always up); else the last call's outcome, never a call of its own. */
  payments: () => { ok: boolean; at: number } | null;
  upstreams: UpstreamHealth;
  probeMs: number;
  timeoutMs: number;
}

function withTimeout(p: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<void>((_, reject) => { timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms); });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** A state that remembers since when it holds. */
class Tracked {
  check: DependencyCheck;
  constructor(state: DependencyState = 'unknown') {
    const now = new Date().toISOString();
    this.check = { state, observedAt: now, since: now };
  }
  set(state: DependencyState, detail?: string): void {
    const now = new Date().toISOString();
    const since = state === this.check.state ? this.check.since : now;
    this.check = { state, observedAt: now, since, ...(detail ? { detail } : {}) };
  }
}

/** Reachability of each upstream's host and port by a TCP connect: nothing is sent, nothing is billed. */
export class TcpUpstreamHealth implements UpstreamHealth {
  private readonly states = new Map<string, Tracked>();
  constructor(private readonly targets: ReadonlyMap<string, string>, private readonly timeoutMs: number) {
    for (const name of targets.keys()) this.states.set(name, new Tracked());
  }

  upstreams(): ReadonlyMap<string, DependencyCheck> {
    return new Map([...this.states].map(([k, v]) => [k, v.check]));
  }

  async refresh(): Promise<void> {
    await Promise.all([...this.targets].map(async ([name, url]) => {
      const u = new URL(url);
      const port = Number(u.port || (u.protocol === 'https:' ? 443 : 80));
      const host = u.hostname.replace(/^\[|\]$/g, '');
      try {
        await withTimeout(new Promise<void>((resolve, reject) => {
          const s = connect({ host, port }, () => { s.destroy(); resolve(); });
          s.once('error', (e) => { s.destroy(); reject(e); });
        }), this.timeoutMs);
        this.states.get(name)!.set('up');
      } catch (e) {
        this.states.get(name)!.set('down', String((e as { code?: string }).code ?? (e as Error).message));
      }
    }));
  }
}

/** Failed probes in a row before a store counts as down (its 401s and 402s answered as 503). */
const STORE_DOWN_AFTER = 2;

/** Probes the stores every `probeMs` (a `SELECT 1`, a `PING`), and reports what it saw last. */
export class HealthMonitor {
  private readonly pg = new Tracked();
  private readonly redis = new Tracked();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  /** Set by the front end while it drains (shutting down): the instance admits nothing new. */
  draining = false;
  /** Failed probes in a row, per store. */
  private readonly failures = new Map<Tracked, number>();

  constructor(private readonly p: HealthProbes) {
    if (!p.postgres) this.pg.set('up', 'embedded (PGlite, in process)');
    if (!p.redis) this.redis.set('up', 'not configured: limits in process');
  }

  start(): void {
    const tick = () => {
      this.running = this.probe().finally(() => {
        this.timer = setTimeout(tick, this.p.probeMs);
        this.timer.unref();
      });
    };
    tick();
  }

  async stop(): Promise<void> {
    clearTimeout(this.timer);
    await this.running.catch(() => undefined);
  }

  async probe(): Promise<void> {
    // A store is down after STORE_DOWN_AFTER failed probes in a row: one slow answer on a loaded machine
    // (or a cluster still loading its slots) must not turn every 402 into a 503 for a second.
    const one = async (t: Tracked, fn: (() => Promise<void>) | null) => {
      if (!fn) return;
      try {
        await withTimeout(fn(), this.p.timeoutMs);
        this.failures.set(t, 0);
        t.set('up');
      } catch (e) {
        const n = (this.failures.get(t) ?? 0) + 1;
        this.failures.set(t, n);
        if (n >= STORE_DOWN_AFTER || t.check.state === 'down') t.set('down', String((e as Error)?.message ?? e).slice(0, 200));
      }
    };
    await Promise.all([one(this.pg, this.p.postgres), one(this.redis, this.p.redis), this.p.upstreams.refresh().catch(() => undefined)]);
  }

  get postgres(): DependencyCheck { return this.pg.check; }
  get redisState(): DependencyCheck { return this.redis.check; }

  payments(): DependencyCheck {
    const last = this.p.payments();
    const now = new Date().toISOString();
    if (last === null) return { state: 'up', observedAt: now, since: now, detail: 'sandbox' };
    if (last.at === 0) return { state: 'unknown', observedAt: now, since: now, detail: 'no provider call yet' };
    const at = new Date(last.at).toISOString();
    return { state: last.ok ? 'up' : 'down', observedAt: at, since: at, detail: 'the last provider call' };
  }

  upstreams(): ReadonlyMap<string, DependencyCheck> { return this.p.upstreams.upstreams(); }

  /** The store that keeps this instance from deciding about keys and money now, if any. */
  storeDown(): 'postgres' | 'redis' | null {
    if (this.redis.check.state === 'down') return 'redis';
    if (this.pg.check.state === 'down') return 'postgres';
    return null;
  }

  /** Whether the instance can admit requests: both stores reachable and not draining. */
  ready(): { ready: boolean; reason: string | null } {
    if (this.draining) return { ready: false, reason: 'draining: this instance is shutting down' };
    const down = this.storeDown();
    if (down) return { ready: false, reason: `${down === 'redis' ? 'Redis' : 'PostgreSQL'} is unreachable` };
    return { ready: true, reason: null };
  }
}

/**
 * The TCP reachability of each upstream, joined with its pool's passive and active health: an
 * upstream its pool has ejected (consecutive failures, a failed probe) shows down even while its
 * port still accepts connections.
 */
export class PooledUpstreamHealth implements UpstreamHealth {
  private readonly since = new Map<string, string>();
  constructor(private readonly tcp: UpstreamHealth, private readonly pool: () => readonly { name: string; healthy: boolean }[]) {}

  upstreams(): ReadonlyMap<string, DependencyCheck> {
    const out = new Map(this.tcp.upstreams());
    const now = new Date().toISOString();
    for (const u of this.pool()) {
      if (u.healthy) { this.since.delete(u.name); continue; }
      if (!this.since.has(u.name)) this.since.set(u.name, now);
      out.set(u.name, { state: 'down', observedAt: now, since: this.since.get(u.name)!, detail: 'ejected by its pool (failed requests or probes)' });
    }
    return out;
  }

  refresh(): Promise<void> { return this.tcp.refresh(); }
}

// Upstream pools: which upstream of a model takes a request (priority, weight, least in-flight), health, and upstream protection.
import type { PoolEntry, UpstreamConfig } from '../config.js';
import { GatewayError } from '../errors.js';
import type { UpstreamHealth } from '../observe/metrics.js';
import { limited, POLL_MAX_MS, POLL_MIN_MS, type SharedLimits } from './shared-limits.js';

/**
 * One upstream's state in this process. Health is passive (consecutive failures eject it for a
 * growing interval; after it, one trial request readmits it or ejects it again) and active (a probe,
 * src/proxy/probe.ts, readmits or counts failures). Protection: at most `maxConcurrency` in flight
 * and `rpm` started in any minute; an upstream's own 429 or 503 with Retry-After pauses it.
 */
class UpstreamState {
  inFlight = 0;
  fails = 0;
  /** Ejections in a row: the next one lasts eject_ms · 2^ejections (at most max_eject_ms). */
  ejections = 0;
  ejectedUntil = 0;
  /** After an ejection: the one request (or probe) that decides readmission is under way. */
  trial = false;
  pausedUntil = 0;
  /** The shared limits (another instance's slots or starts) refused it: not tried again before this. */
  sharedBusyUntil = 0;
  /** That refusal was for max_concurrency: a slot may free at any moment (asked again by polling). */
  sharedFull = false;
  /** Start times of the last `rpm` requests, as a ring: full while the oldest is under a minute old. */
  readonly starts: number[];
  private next = 0;
  /** Smooth weighted round-robin credit (nginx's), spreading equal loads by weight. */
  credit = 0;
  readonly waiters: Waiter[] = [];
  ejectionsTotal = 0;
  retriesTotal = 0;
  busyTotal = 0;
  /** Requests let through on this instance's own limits because the shared ones could not be asked. */
  failOpenTotal = 0;

  constructor(readonly cfg: UpstreamConfig) { this.starts = cfg.rpm ? new Array<number>(cfg.rpm).fill(-Infinity) : []; }

  /** Ejected now (a half-open upstream whose trial is under way counts as ejected). */
  ejected(now: number): boolean { return now < this.ejectedUntil || (this.ejectedUntil !== 0 && this.trial); }
  /** Healthy enough to be picked (a half-open one is picked for its trial). */
  usable(now: number): boolean { return !this.ejected(now); }
  /** When it can next take a request, if it is full or paused now (else 0). */
  busyUntil(now: number): number {
    if (now < this.pausedUntil) return this.pausedUntil;
    if (now < this.sharedBusyUntil) return this.sharedBusyUntil;
    if (this.cfg.maxConcurrency !== undefined && this.inFlight >= this.cfg.maxConcurrency) return now + 1000;
    if (this.starts.length > 0 && this.starts[this.next]! > now - 60_000) return this.starts[this.next]! + 60_000;
    return 0;
  }
  /** A request waiting until `until` may get in: a slot may free at any moment, or the pause or minute ends by then. */
  waitable(now: number, until: number): boolean {
    if (now >= this.pausedUntil && this.cfg.maxConcurrency !== undefined && this.inFlight >= this.cfg.maxConcurrency) return true;
    if (now >= this.pausedUntil && now < this.sharedBusyUntil && this.sharedFull) return true;
    return this.busyUntil(now) <= until;
  }
  /** Counts a request started; true when it is the trial of a half-open upstream. */
  start(now: number): boolean {
    this.inFlight++;
    if (this.starts.length > 0) { this.starts[this.next] = now; this.next = (this.next + 1) % this.starts.length; }
    if (this.ejectedUntil === 0 || now < this.ejectedUntil || this.trial) return false;
    this.trial = true;
    return true;
  }
}

interface Waiter { wake(): void }

/** A picked upstream, held until the reply ends: `release` frees its slot once. */
export interface Lease {
  readonly entry: PoolEntry;
  /** The upstream answered (any status but 5xx and 429): its failures are forgotten, an ejection ends. */
  ok(): void;
  /** A connect failure, 5xx or timeout: counts toward an ejection. */
  failed(): void;
  /** A 429 or 503 with Retry-After (seconds): the upstream takes nothing until then. */
  pause(ms: number): void;
  release(): void;
}


/**
 * A lease as a class, not an object of closures: one lives as long as each reply (an open stream's
 * included), and the literal cost four closures and their context per request (issue 29).
 */
class PoolLease implements Lease {
  private released = false;

  constructor(private readonly pools: Pools, private readonly s: UpstreamState, readonly entry: PoolEntry,
    private readonly trial: boolean, private readonly sharedId: string | undefined) {}

  ok(): void { this.pools.ok(this.entry.name); }

  failed(): void { this.pools.failed(this.entry.name); }

  pause(ms: number): void {
    this.s.pausedUntil = Math.max(this.s.pausedUntil, this.pools.now() + ms);
    this.pools.shared?.pause(this.entry.name, ms);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    const s = this.s;
    s.inFlight--;
    this.pools.shared?.release(this.entry.name, this.sharedId);
    // A trial that ended with no verdict (the client left) lets the next request try.
    if (this.trial && s.ejectedUntil !== 0) s.trial = false;
    s.waiters.shift()?.wake();
  }
}

export class Pools {
  private readonly states = new Map<string, UpstreamState>();

  /**
   * With `shared` (Redis), an upstream's max_concurrency and rpm hold across every instance: this
   * process's own state still picks and bounds, and an upstream with a limit is then asked of Redis.
   */
  constructor(configs: ReadonlyMap<string, UpstreamConfig>, readonly now: () => number = Date.now, readonly shared?: SharedLimits) {
    for (const [name, cfg] of configs) this.states.set(name, new UpstreamState(cfg));
    shared?.onPause((name, ms) => { const s = this.states.get(name); if (s) s.pausedUntil = Math.max(s.pausedUntil, this.now() + ms); });
  }

  private state(name: string): UpstreamState {
    const s = this.states.get(name);
    if (!s) throw new Error(`no upstream ${name}`);
    return s;
  }

  /**
   * The upstream the next attempt goes to, or null when every one of the pool has been tried. Picks
   * among the usable, not-full upstreams of the best priority that has any (least in-flight per weight,
   * ties spread by weight); when every untried one is full or paused, waits in their queue until
   * `deadline`, then throws 503 upstream_busy; when every untried one is ejected, tries the one whose
   * ejection ends first (a pool never refuses for health alone: a lone upstream is always tried).
   */
  async acquire(pool: readonly PoolEntry[], tried: ReadonlySet<string>, deadline: number, gone: () => boolean): Promise<Lease | null> {
    let queuedAt: number | undefined;
    let poll = POLL_MIN_MS;
    for (;;) {
      const now = this.now();
      const untried = tried.size === 0 ? pool : pool.filter((e) => !tried.has(e.name));
      if (untried.length === 0) return null;
      const picked = this.pick(untried, now);
      if (picked) {
        const s = this.state(picked.name);
        if (!this.shared || !limited(s.cfg)) return this.lease(picked, now);
        // Counted in flight while Redis is asked, so this instance's own bound holds meanwhile.
        s.inFlight++;
        const r = await this.shared.take(s.cfg);
        s.inFlight--;
        const at = this.now();
        if (r.kind === 'taken') { s.sharedBusyUntil = 0; s.sharedFull = false; return this.lease(picked, at, r.id); }
        // Redis unavailable: fail open to this instance's own limits (logged, counted in /metrics).
        if (r.kind === 'unavailable') { s.failOpenTotal++; return this.lease(picked, at); }
        if (r.kind === 'paused') s.pausedUntil = Math.max(s.pausedUntil, at + r.retryMs);
        else s.sharedBusyUntil = at + (r.kind === 'full' ? poll : r.retryMs);
        s.sharedFull = r.kind === 'full';
        poll = Math.min(POLL_MAX_MS, poll * 2);
        continue;
      }
      const busy = untried.filter((e) => { const s = this.state(e.name); return s.usable(now) && s.busyUntil(now) > 0; });
      if (busy.length === 0) {
        // Every untried upstream is ejected: the one back soonest gets the request.
        let soonest = untried[0]!;
        for (const e of untried) if (this.state(e.name).ejectedUntil < this.state(soonest.name).ejectedUntil) soonest = e;
        return this.lease(soonest, now);
      }
      const states = busy.map((e) => this.state(e.name));
      const queueMs = Math.max(...states.map((s) => s.cfg.queueMs));
      queuedAt ??= now;
      const until = Math.min(deadline, queuedAt + queueMs);
      const freeAt = Math.min(...states.map((s) => s.busyUntil(now)));
      // Refused at once when no queue has room or nothing can free before the wait ends (a 30 s Retry-After pause).
      if (now >= until || gone() || states.every((s) => s.waiters.length >= s.cfg.queueSize || !s.waitable(now, until))) {
        for (const s of states) s.busyTotal++;
        throw upstreamBusy(Math.max(1, Math.ceil((freeAt - now) / 1000)));
      }
      await this.wait(states, Math.min(until, freeAt) - now);
    }
  }

  /** Waits until a slot of one of `states` frees, or `ms` pass. */
  private wait(states: UpstreamState[], ms: number): Promise<void> {
    return new Promise((resolve) => {
      const w: Waiter = { wake: () => { clearTimeout(timer); for (const s of states) { const i = s.waiters.indexOf(w); if (i >= 0) s.waiters.splice(i, 1); } resolve(); } };
      const timer = setTimeout(() => w.wake(), Math.max(1, ms));
      for (const s of states) if (s.waiters.length < s.cfg.queueSize) s.waiters.push(w);
    });
  }

  private pick(untried: readonly PoolEntry[], now: number): PoolEntry | undefined {
    let best: PoolEntry | undefined;
    let bestPriority = Infinity;
    for (const e of untried) {
      if (e.priority > bestPriority) continue;
      const s = this.state(e.name);
      if (!s.usable(now) || s.busyUntil(now) > 0) continue;
      if (e.priority < bestPriority) { bestPriority = e.priority; best = undefined; }
      best = best === undefined ? e : this.better(best, e);
    }
    if (best === undefined) return undefined;
    if (untried.length > 1) {
      // Smooth weighted round-robin among the level's candidates: each gains its weight, the one picked pays the total.
      let total = 0;
      for (const e of untried) {
        if (e.priority !== bestPriority) continue;
        const s = this.state(e.name);
        if (!s.usable(now) || s.busyUntil(now) > 0) continue;
        s.credit += e.weight; total += e.weight;
      }
      this.state(best.name).credit -= total;
    }
    return best;
  }

  /** Fewer in flight per unit of weight wins; at equal load, the larger round-robin credit. */
  private better(a: PoolEntry, b: PoolEntry): PoolEntry {
    const sa = this.state(a.name); const sb = this.state(b.name);
    const la = sa.inFlight * b.weight; const lb = sb.inFlight * a.weight;
    if (la !== lb) return la < lb ? a : b;
    return sb.credit + b.weight > sa.credit + a.weight ? b : a;
  }

  /** `sharedId`: the slot the shared limits gave (released with it). */
  private lease(entry: PoolEntry, now: number, sharedId?: string): Lease {
    const s = this.state(entry.name);
    return new PoolLease(this, s, entry, s.start(now), sharedId);
  }

  /** An answer: failures are forgotten, and an ejected upstream (its trial, or the last resort of a pool) is back. */
  ok(name: string): void {
    const s = this.state(name);
    s.fails = 0;
    if (s.ejectedUntil !== 0) { s.ejectedUntil = 0; s.ejections = 0; s.trial = false; }
  }

  failed(name: string): void {
    const s = this.state(name);
    const now = this.now();
    s.fails++;
    const trial = s.ejectedUntil !== 0 && now >= s.ejectedUntil;
    if (trial || (s.ejectedUntil === 0 && s.fails >= s.cfg.health.ejectAfter)) {
      const h = s.cfg.health;
      s.ejectedUntil = now + Math.min(h.maxEjectMs, h.ejectMs * 2 ** Math.min(s.ejections, 20));
      s.ejections++; s.ejectionsTotal++; s.fails = 0; s.trial = false;
    }
  }

  /** An attempt on `name` failed and the request went on to another upstream. */
  retried(name: string): void { this.state(name).retriesTotal++; }

  /** Ejected and not yet back (a probe may readmit it). */
  ejected(name: string): boolean { return this.state(name).ejected(this.now()); }

  /** A probe answered: an ejected upstream is back at once. */
  probeOk(name: string): void {
    const s = this.state(name);
    s.fails = 0;
    if (s.ejectedUntil !== 0) { s.ejectedUntil = 0; s.ejections = 0; s.trial = false; }
  }

  health(): UpstreamHealth[] {
    return [...this.states.entries()].map(([name, s]) => ({
      name, healthy: s.ejectedUntil === 0, inFlight: s.inFlight, ejections: s.ejectionsTotal, retries: s.retriesTotal, busy: s.busyTotal, failOpen: s.failOpenTotal,
    }));
  }
}

export function upstreamBusy(retryAfterS: number): GatewayError {
  return new GatewayError({ status: 503, code: 'upstream_busy', type: 'server_error', retryable: true, headers: { 'retry-after': String(retryAfterS) },
    message: `Every upstream of this model is at its limit. Retry after ${retryAfterS} s. Nothing was billed.` });
}

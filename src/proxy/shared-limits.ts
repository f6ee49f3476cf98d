// Upstream protection shared by every instance on one Redis: max_concurrency as expiring leases, rpm as a sliding minute, Retry-After pauses broadcast.
import { randomBytes } from 'node:crypto';
import type { UpstreamConfig } from '../config.js';
import { openRedis, type RedisClient } from '../gate/limits/redis-connect.js';
import { log } from '../observe/log.js';

// Per upstream, under its hash tag `{upstream:<name>}` (one slot, so a Redis Cluster runs each script on one node):
//   slots  zset: lease id -> expiry (Redis time, ms); a lease its owner stops renewing is dropped at its expiry
//   starts zset: request id -> start time (ms); the sliding minute of `rpm`
//   pause  string with a PX expiry: the upstream said Retry-After; nobody sends it anything until it expires
// KEYS: slots starts pause. ARGV: id conc ('' = none) rpm ('' = none) ttl.
// Returns {0} taken, {1, ms} paused for ms, {2} full (a slot frees when a request ends: poll), {3, ms} rpm used up until ms.
const TAKE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local paused = redis.call('PTTL', KEYS[3])
if paused > 0 then return {1, paused} end
local conc, rpm = tonumber(ARGV[2]), tonumber(ARGV[3])
if conc then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= conc then return {2} end
end
if rpm then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[2]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {3, math.max(1, tonumber(oldest[2]) + 60000 - now)}
  end
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[2], 61000)
end
if conc then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) + 1000)
end
return {0}
`;

// KEYS: slots. ARGV: ttl, then the lease ids this instance still holds: each one's expiry moves to now + ttl (a freed one stays freed).
const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[i]) end
if #ARGV > 1 then redis.call('PEXPIRE', KEYS[1], ttl + 1000) end
return #ARGV - 1
`;

// KEYS: pause. ARGV: ms. Lengthens the pause to ms from now (never shortens it).
const PAUSE = `
local ms = tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) < ms then redis.call('SET', KEYS[1], '1', 'PX', ms) end
return 1
`;

type Scripted = RedisClient & {
  tgUpTake(...args: string[]): Promise<number[]>;
  tgUpRenew(...args: string[]): Promise<number>;
  tgUpPause(...args: string[]): Promise<number>;
};

/** A lease lives this long past its owner's last renewal: a kill -9'd instance's slots are free again within it. */
export const LEASE_TTL_MS = 5000;
/** Every live instance renews its leases this often. */
export const LEASE_RENEW_MS = 1000;
/** A waiter for a slot held on another instance asks again after this long (doubling per try, at most POLL_MAX_MS). */
export const POLL_MIN_MS = 10;
export const POLL_MAX_MS = 100;

/** What the shared limits answered: a slot (its id, to release), a refusal with when to ask again, or Redis could not be asked. */
export type SharedTake =
  | { kind: 'taken'; id: string | undefined }
  | { kind: 'paused' | 'rate'; retryMs: number }
  | { kind: 'full' }
  | { kind: 'unavailable' };

/** The upstream limits shared by every instance; Pools asks it only for an upstream with max_concurrency or rpm. */
export interface SharedLimits {
  take(cfg: UpstreamConfig): Promise<SharedTake>;
  release(name: string, id: string | undefined): void;
  /** The upstream said Retry-After: every instance pauses it. */
  pause(name: string, ms: number): void;
  /** Sets how a pause learned from another instance reaches this one's pool. */
  onPause(listener: (name: string, ms: number) => void): void;
  /** Script calls sent so far (an upstream with no limits must cost none). */
  readonly calls: number;
  close(): Promise<void>;
}

/** Whether `cfg` has a limit that the instances must share. */
export function limited(cfg: UpstreamConfig): boolean {
  return cfg.maxConcurrency !== undefined || cfg.rpm !== undefined;
}

export class RedisUpstreamLimits implements SharedLimits {
  private readonly redis: Scripted;
  private readonly sub: RedisClient;
  private readonly owner = randomBytes(6).toString('hex');
  private seq = 0;
  /** The leases this instance holds, by upstream: renewed every LEASE_RENEW_MS while any is held. */
  private readonly held = new Map<string, Set<string>>();
  private renewTimer: NodeJS.Timeout | undefined;
  private listener: (name: string, ms: number) => void = () => undefined;
  /** Redis could not be asked at the last try: logged once per outage. */
  private down = false;
  calls = 0;
  private readonly channel: string;
  private readonly subscribed: Promise<void>;

  constructor(url: string, private readonly prefix: string) {
    // As the limiter: no offline queue, no resend; a command that cannot be sent fails at once and the
    // request goes on under this instance's own limits. A Redis that hangs fails it after 1 s.
    const r = openRedis(url, { maxRetriesPerRequest: 0, enableOfflineQueue: false, autoResendUnfulfilledCommands: false,
      enableAutoPipelining: true, lazyConnect: false, commandTimeout: 1000 });
    r.on('error', () => undefined);
    r.defineCommand('tgUpTake', { numberOfKeys: 3, lua: TAKE });
    r.defineCommand('tgUpRenew', { numberOfKeys: 1, lua: RENEW });
    r.defineCommand('tgUpPause', { numberOfKeys: 1, lua: PAUSE });
    this.redis = r as Scripted;
    // Pauses reach every instance by pub/sub, so an upstream with no limits costs no Redis call per request.
    this.channel = `${prefix}upstream-pause`;
    this.sub = openRedis(url, { lazyConnect: false });
    this.sub.on('error', () => undefined);
    this.subscribed = this.sub.subscribe(this.channel).then(() => undefined);
    this.subscribed.catch(() => undefined);
    this.sub.on('message', (_ch: string, msg: string) => {
      const i = msg.lastIndexOf('|');
      const ms = Number(msg.slice(i + 1));
      if (i > 0 && msg.slice(0, i) !== '' && Number.isFinite(ms)) this.listener(msg.slice(0, i), ms);
    });
  }

  /** Both connections up and the pause channel subscribed (at most 10 s, as the limiter waits): a request before it would fail open. */
  async ready(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error('Redis (upstream limits) did not become ready within 10 s')), 10_000); });
    const up = this.redis.status === 'ready' ? Promise.resolve() : new Promise<void>((resolve) => this.redis.once('ready', () => resolve()));
    try { await Promise.race([Promise.all([up, this.subscribed]), limit]); } finally { clearTimeout(timer); }
  }

  private keys(name: string): [string, string, string] {
    const p = `${this.prefix}{upstream:${name}}`;
    return [`${p}:slots`, `${p}:starts`, `${p}:pause`];
  }

  async take(cfg: UpstreamConfig): Promise<SharedTake> {
    const id = `${this.owner}:${(this.seq++).toString(36)}`;
    this.calls++;
    let r: number[];
    try {
      r = await this.redis.tgUpTake(...this.keys(cfg.name), id, cfg.maxConcurrency === undefined ? '' : String(cfg.maxConcurrency),
        cfg.rpm === undefined ? '' : String(cfg.rpm), String(LEASE_TTL_MS));
    } catch (e) {
      if (!this.down) {
        this.down = true;
        log('warn', 'upstream limits: Redis unavailable, each instance holds max_concurrency and rpm on its own until it is back', { upstream: cfg.name, error: (e as Error).message });
      }
      return { kind: 'unavailable' };
    }
    if (this.down) { this.down = false; log('info', 'upstream limits: Redis is back, max_concurrency and rpm are shared again', { upstream: cfg.name }); }
    switch (r[0]) {
      case 0: break;
      case 1: return { kind: 'paused', retryMs: Number(r[1]) };
      case 3: return { kind: 'rate', retryMs: Number(r[1]) };
      default: return { kind: 'full' };
    }
    if (cfg.maxConcurrency === undefined) return { kind: 'taken', id: undefined };
    let set = this.held.get(cfg.name);
    if (!set) { set = new Set(); this.held.set(cfg.name, set); }
    set.add(id);
    this.renewSoon();
    return { kind: 'taken', id };
  }

  release(name: string, id: string | undefined): void {
    if (id === undefined) return;
    this.held.get(name)?.delete(id);
    this.calls++;
    // A release that fails (Redis away) leaves the lease to expire: it is no longer renewed.
    this.redis.zrem(this.keys(name)[0], id).catch(() => undefined);
  }

  pause(name: string, ms: number): void {
    this.calls++;
    this.redis.tgUpPause(this.keys(name)[2], String(Math.ceil(ms))).catch(() => undefined);
    this.redis.publish(this.channel, `${name}|${Math.ceil(ms)}`).catch(() => undefined);
  }

  onPause(listener: (name: string, ms: number) => void): void { this.listener = listener; }

  /** Renews every held lease each LEASE_RENEW_MS, while any is held (an idle instance sends nothing). */
  private renewSoon(): void {
    if (this.renewTimer) return;
    this.renewTimer = setTimeout(() => {
      this.renewTimer = undefined;
      let any = false;
      for (const [name, ids] of this.held) {
        if (ids.size === 0) { this.held.delete(name); continue; }
        any = true;
        this.calls++;
        this.redis.tgUpRenew(this.keys(name)[0], String(LEASE_TTL_MS), ...ids).catch(() => undefined);
      }
      if (any) this.renewSoon();
    }, LEASE_RENEW_MS);
    this.renewTimer.unref();
  }

  async close(): Promise<void> {
    if (this.renewTimer) clearTimeout(this.renewTimer);
    // Leases still held (a drain cut short) are given back rather than left to expire.
    for (const [name, ids] of this.held) if (ids.size > 0) await this.redis.zrem(this.keys(name)[0], ...ids).catch(() => undefined);
    await Promise.all([this.redis.quit().catch(() => this.redis.disconnect()), this.sub.quit().catch(() => this.sub.disconnect())]);
  }
}

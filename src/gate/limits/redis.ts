// The Redis limiter: one Lua script per admission (token bucket, concurrency, holds) so many instances agree.
import { Redis } from 'ioredis';
import type { AdmitInput, AdmitOutcome, Limiter } from './types.js';

// Shared by both scripts: drop one hold and take its amount off the account's and the key's totals.
const DROP = `
local function drop(ah, hh, hz, r)
  local rec = redis.call('HGET', hh, r)
  redis.call('ZREM', hz, r)
  if not rec then return end
  local k, amt = string.match(rec, '^(.-)|(%d+)$')
  if amt ~= '0' then
    redis.call('HINCRBY', ah, 'total', '-' .. amt)
    redis.call('HINCRBY', ah, 'a:' .. k, '-' .. amt)
  end
  if redis.call('HINCRBY', ah, 'n:' .. k, -1) <= 0 then redis.call('HDEL', ah, 'n:' .. k, 'a:' .. k) end
  redis.call('HDEL', hh, r)
end
`;

const ADMIT = `${DROP}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ah, hh, hz, rb = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local rid, kid, hold = ARGV[1], ARGV[2], ARGV[3]
local rpm, conc, balance = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local ceiling, spent, ttl = ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
for _, r in ipairs(redis.call('ZRANGEBYSCORE', hz, '-inf', now, 'LIMIT', 0, 100)) do drop(ah, hh, hz, r) end
local total = tonumber(redis.call('HGET', ah, 'total') or '0')
local mineAmt = tonumber(redis.call('HGET', ah, 'a:' .. kid) or '0')
local mineN = tonumber(redis.call('HGET', ah, 'n:' .. kid) or '0')
if balance - total <= 0 then return {1} end
if ceiling ~= '' and spent + mineAmt >= tonumber(ceiling) then return {2} end
local b = redis.call('HMGET', rb, 't', 'ts')
local rate = rpm / 60000
local tokens = tonumber(b[1]) or rpm
local ts = tonumber(b[2]) or now
tokens = math.min(rpm, tokens + math.max(0, now - ts) * rate)
if tokens < 1 then
  redis.call('HSET', rb, 't', tostring(tokens), 'ts', tostring(now))
  redis.call('PEXPIRE', rb, 120000)
  return {3, 0, math.ceil((rpm - tokens) / rate), math.ceil((1 - tokens) / rate)}
end
if mineN >= conc then
  redis.call('HSET', rb, 't', tostring(tokens), 'ts', tostring(now))
  redis.call('PEXPIRE', rb, 120000)
  return {4, mineN, math.floor(tokens), math.ceil((rpm - tokens) / rate)}
end
tokens = tokens - 1
redis.call('HSET', rb, 't', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', rb, 120000)
redis.call('HSET', hh, rid, kid .. '|' .. hold)
redis.call('ZADD', hz, now + ttl, rid)
if hold ~= '0' then
  redis.call('HINCRBY', ah, 'total', hold)
  redis.call('HINCRBY', ah, 'a:' .. kid, hold)
end
redis.call('HINCRBY', ah, 'n:' .. kid, 1)
for _, k in ipairs({ah, hh, hz}) do redis.call('PEXPIRE', k, ttl + 60000) end
return {0, math.floor(tokens), math.ceil((rpm - tokens) / rate)}
`;

// Drops every hold named in ARGV: the releases of one account queued in one event-loop turn.
const RELEASE = `${DROP}
for _, r in ipairs(ARGV) do drop(KEYS[1], KEYS[2], KEYS[3], r) end
return #ARGV
`;

type Scripted = Redis & {
  tgAdmit(ah: string, hh: string, hz: string, rb: string, ...args: string[]): Promise<number[]>;
  tgRelease(ah: string, hh: string, hz: string, ...rids: string[]): Promise<number>;
};

interface ReleaseBatch { ids: string[]; done: Promise<void>; settle(err?: unknown): void }

export class RedisLimiter implements Limiter {
  readonly kind = 'redis' as const;
  private readonly redis: Scripted;
  /** Releases waiting for the end of this event-loop turn, by account: one script call each. */
  private releases = new Map<string, ReleaseBatch>();

  constructor(url: string, private readonly prefix: string) {
    const r = new Redis(url, { maxRetriesPerRequest: 2, enableAutoPipelining: true, lazyConnect: false });
    r.defineCommand('tgAdmit', { numberOfKeys: 4, lua: ADMIT });
    r.defineCommand('tgRelease', { numberOfKeys: 3, lua: RELEASE });
    this.redis = r as Scripted;
  }

  async ready(): Promise<void> {
    await this.redis.ping();
  }

  private acctKeys(accountId: string): [string, string, string] {
    const p = `${this.prefix}{${accountId}}`;
    return [`${p}:holdsum`, `${p}:holds`, `${p}:holdexp`];
  }

  async admit(i: AdmitInput): Promise<AdmitOutcome> {
    const [ah, hh, hz] = this.acctKeys(i.accountId);
    const r = await this.redis.tgAdmit(ah, hh, hz, `${this.prefix}rpm:${i.keyId}`,
      i.requestId, i.keyId, i.hold.toString(), String(i.rpm), String(i.concurrency), i.balance.toString(),
      i.ceiling === null ? '' : i.ceiling.toString(), i.periodSpent.toString(), String(i.ttlMs));
    switch (r[0]) {
      case 0: return { ok: true, remaining: r[1]!, resetMs: r[2]! };
      case 1: return { ok: false, reason: 'insufficient_balance' };
      case 2: return { ok: false, reason: 'key_spend_limit_reached' };
      case 3: return { ok: false, reason: 'rate_limit_exceeded', remaining: 0, resetMs: r[2]!, retryMs: r[3]! };
      default: return { ok: false, reason: 'concurrency_limit_exceeded', inFlight: r[1]!, remaining: r[2]!, resetMs: r[3]! };
    }
  }

  /**
   * Queues the hold's release and sends the turn's releases of each account as one script call
   * (after the turn's I/O, in `setImmediate`): a group commit settles tens of requests at once, and
   * one call per request cost Redis and ioredis CPU for nothing. Resolves when the hold is gone.
   */
  release(accountId: string, requestId: string): Promise<void> {
    let batch = this.releases.get(accountId);
    if (!batch) {
      if (this.releases.size === 0) setImmediate(() => this.flushReleases());
      let settle!: (err?: unknown) => void;
      const done = new Promise<void>((resolve, reject) => { settle = (err) => (err === undefined ? resolve() : reject(err)); });
      batch = { ids: [], done, settle };
      this.releases.set(accountId, batch);
    }
    batch.ids.push(requestId);
    return batch.done;
  }

  private flushReleases(): void {
    const due = this.releases;
    this.releases = new Map();
    for (const [accountId, b] of due) {
      const [ah, hh, hz] = this.acctKeys(accountId);
      this.redis.tgRelease(ah, hh, hz, ...b.ids).then(() => b.settle(), (err: unknown) => b.settle(err ?? new Error('release failed')));
    }
  }

  async openHolds(accountId: string): Promise<number> {
    return this.redis.hlen(this.acctKeys(accountId)[1]);
  }

  async close(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}

// Opens the limiter's Redis from one URL: a single server, a Redis Cluster, or the master a Sentinel group names.
import type { Socket } from 'node:net';
import { Cluster, Redis, type RedisOptions } from 'ioredis';

export type RedisClient = Redis | Cluster;

export interface RedisTarget {
  mode: 'single' | 'cluster' | 'sentinel';
  /** cluster: seed nodes; sentinel: the sentinels. */
  nodes: { host: string; port: number }[];
  /** sentinel: the master's name. */
  name?: string;
  username?: string;
  password?: string;
  tls: boolean;
}

const MULTI = /^(rediss?)\+(cluster|sentinel):\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/?#]+)(?:\/([^?#]*))?$/;

/**
 * `redis://` and `rediss://` are one server (as ioredis reads them). `redis+cluster://[user:pass@]h1:p1,h2:p2`
 * is a Redis Cluster (any of its nodes; the rest are discovered); `redis+sentinel://[user:pass@]s1:p1,s2:p2/name`
 * is the master that the sentinels name `name`. The credentials are the data nodes'; `rediss+…` is TLS.
 */
export function parseRedisUrl(url: string): RedisTarget {
  const m = MULTI.exec(url);
  if (!m) return { mode: 'single', nodes: [], tls: url.startsWith('rediss:') };
  const nodes = m[5]!.split(',').filter(Boolean).map((hp) => {
    const i = hp.lastIndexOf(':');
    const port = i < 0 ? (m[2] === 'sentinel' ? 26379 : 6379) : Number(hp.slice(i + 1));
    if (!Number.isInteger(port) || port <= 0 || port > 65535) throw new Error(`bad port in Redis URL node "${hp}"`);
    return { host: i < 0 ? hp : hp.slice(0, i), port };
  });
  if (nodes.length === 0) throw new Error('a redis+cluster:// or redis+sentinel:// URL needs at least one host:port');
  const name = m[6] ? decodeURIComponent(m[6]) : undefined;
  if (m[2] === 'sentinel' && !name) throw new Error('a redis+sentinel:// URL needs the master name as its path: redis+sentinel://host:26379/mymaster');
  return {
    mode: m[2] as 'cluster' | 'sentinel', nodes, name, tls: m[1] === 'rediss',
    username: m[3] ? decodeURIComponent(m[3]) : undefined, password: m[4] !== undefined ? decodeURIComponent(m[4]) : undefined,
  };
}

/**
 * A client on the URL's Redis with `options` on every connection it makes. With `enableAutoPipelining`, one
 * server or a Sentinel's master gets the turn's commands in one write by corking its socket instead
 * (`corkEachTurn`); a Cluster keeps ioredis's auto-pipelining, which also groups the commands by node.
 */
export function openRedis(url: string, options: RedisOptions): RedisClient {
  const t = parseRedisUrl(url);
  const auth: RedisOptions = { ...(t.username ? { username: t.username } : {}), ...(t.password !== undefined ? { password: t.password } : {}), ...(t.tls ? { tls: {} } : {}) };
  if (t.mode !== 'cluster') {
    const batched = options.enableAutoPipelining === true;
    const o = batched ? { ...options, enableAutoPipelining: false } : options;
    const r = t.mode === 'single' ? new Redis(url, o) : new Redis({ ...o, ...auth, sentinels: t.nodes, name: t.name });
    return batched ? corkEachTurn(r) : r;
  }
  const { enableOfflineQueue, enableAutoPipelining, lazyConnect, ...node } = options;
  // A command whose connection closed may have run: it is failed, never resent (retryDelayOnFailover 0),
  // as on one server. MOVED/ASK/TRYAGAIN/CLUSTERDOWN replies ran nothing and are followed.
  return new Cluster(t.nodes, {
    enableOfflineQueue, enableAutoPipelining, lazyConnect, retryDelayOnFailover: 0, scaleReads: 'master',
    redisOptions: { ...node, ...auth },
  });
}

/** A client whose turn's commands wait in its corked socket: `uncorkNow` writes them at once. */
export interface Corked {
  /**
   * Writes the commands corked so far now, instead of in the `setImmediate` after. For a caller that runs in
   * `setImmediate` itself, after the turn's I/O: what it sends would otherwise wait a whole loop iteration.
   */
  uncorkNow?(): void;
}

/**
 * Sends each event-loop turn's commands in one socket write: the socket is corked at the turn's first command
 * and uncorked in `setImmediate`, after the turn's I/O callbacks, where ioredis's auto-pipelining flushes too.
 * A caller already in `setImmediate` uncorks as it ends (`uncorkNow`): a `setImmediate` made there runs only in
 * the next loop iteration, after one more poll of the event loop.
 * Auto-pipelining builds a `Pipeline` per turn that copies every defined script's two methods onto itself, a
 * dictionary object of several KB that V8 kept past scavenges: one request at a time, a third of what each
 * scavenge copied (docs/benchmarks.md, "The sequential p99"). Without either, every command is a system call.
 * Replies are matched in order as before: ioredis queues each command as it writes it.
 */
export function corkEachTurn(r: Redis): Redis {
  let corked: Socket | null = null;
  const uncork = (): void => {
    const s = corked;
    corked = null;
    s?.uncork();
  };
  const send = r.sendCommand;
  r.sendCommand = function (this: Redis, command, stream) {
    if (corked === null && stream === undefined) {
      const s = (this as unknown as { stream?: Socket }).stream;
      if (s?.writable) {
        s.cork();
        corked = s;
        setImmediate(uncork);
      }
    }
    return send.call(this, command, stream);
  } as Redis['sendCommand'];
  (r as Redis & Corked).uncorkNow = uncork;
  return r;
}

// Builds and closes every stage of the gateway; owns the Services type. Nothing starts as a side effect of routing.
import { EventEmitter } from 'node:events';
import { join } from 'node:path';
import type { Config } from './config.js';
import { openPglite, openPostgres, type Db } from './store/db.js';
import { StateCache } from './gate/cache.js';
import { MemoryLimiter } from './gate/limits/memory.js';
import { RedisLimiter } from './gate/limits/redis.js';
import type { Limiter } from './gate/limits/types.js';
import type { AdmissionDeps } from './gate/admission.js';
import { Settler } from './ledger/settle.js';
import { DebitJournal } from './ledger/journal.js';
import { Committer } from './exchange/committer.js';
import { Recovery } from './exchange/recovery.js';
import { ModelRegistry } from './resolve/models.js';
import { Upstreams } from './proxy/upstream.js';
import { startSim, type SimHandle } from './sim/index.js';
import { Metrics } from './observe/metrics.js';
import { Billing } from './billing/core.js';
import { BatchWorker } from './jobs/batch-worker.js';
import { batchEndpoints } from './families/alpha/batches.js';
import { sweepUploads } from './store/files.js';
import { findFfmpeg, type Ffmpeg } from './audio/ffmpeg.js';
import { log } from './observe/log.js';

export interface Services {
  config: Config;
  /** 'balance' (accountId: string, balance: bigint) after every committed ledger change seen by this instance. */
  events: EventEmitter;
  db: Db;
  cache: StateCache;
  limiter: Limiter;
  settler: Settler;
  /** Commits priced debits after their responses are out. */
  committer: Committer;
  recovery: Recovery;
  metrics: Metrics;
  models: ModelRegistry;
  upstreams: Upstreams;
  admission: AdmissionDeps;
  billing: Billing;
  /** Claims and runs batch work (validation, lines, closing) from the store. */
  batches: BatchWorker;
  /** The simulated upstreams this process runs for `upstreams.NAME.sim` (test infrastructure). */
  sims: SimHandle[];
  /** Debian's ffmpeg, found at start-up: converts speech to the formats src/audio cannot make (aac). */
  ffmpeg: Ffmpeg | undefined;
}

/** The debit journal of a process without Redis: in the data dir (PGlite's or, with PostgreSQL, its own). */
export function journalPath(dataDir: string): string {
  return join(dataDir, 'run', 'debits.journal');
}

export async function openServices(config: Config, dataDir: string): Promise<Services> {
  const c = config;
  // looked for while the store opens (a child process: half a second on a loaded machine)
  const finding = findFfmpeg();
  const db = c.databaseUrl ? await openPostgres(c.databaseUrl, c.poolSize) : await openPglite(dataDir);
  const cache = new StateCache(db);
  await cache.init();
  cache.start();
  let limiter: Limiter;
  if (c.redisUrl) {
    const r = new RedisLimiter(c.redisUrl, c.redisPrefix);
    await r.ready();
    limiter = r;
  } else limiter = new MemoryLimiter(new DebitJournal(journalPath(dataDir)));
  const metrics = new Metrics();
  const events = new EventEmitter();
  const settler = new Settler(db, {
    balance: (id, bal, v) => { cache.balance(id, bal, v); events.emit('balance', id, bal); },
    spend: (k, p, st, sp, v) => cache.spend(k, p, st, sp, v),
  });
  const committer = new Committer(settler, limiter, db);
  const recovery = new Recovery(limiter, committer);
  const sims: SimHandle[] = [];
  const simUrls = new Map<string, string>();
  for (const [name, u] of c.upstreams) {
    if (!u.sim) continue;
    const sim = await startSim({ host: '127.0.0.1', port: 0, tokenDelayMs: u.sim.tokenDelayMs, transcription: u.sim.transcription });
    sims.push(sim);
    simUrls.set(name, sim.url);
  }
  const maxTimeout = Math.max(...[...c.upstreams.values()].map((u) => u.timeoutMs));
  const admission: AdmissionDeps = {
    cache, limiter, metrics, defaultRpm: c.limits.defaultRpm, defaultConcurrency: c.limits.defaultConcurrency,
    holdTtlMs: maxTimeout + 60_000, allowOverdraft: c.limits.allowOverdraft, openHolds: { count: 0, releasing: new Set() },
  };
  const ffmpeg = await finding;
  log('info', ffmpeg ? 'ffmpeg found: speech formats it converts to' : 'ffmpeg not found: speech formats only it makes (aac) are refused with 400',
    ffmpeg ? { bin: ffmpeg.bin, formats: ffmpeg.formats } : {});
  const base = { config: c, events, db, cache, limiter, settler, committer, recovery, metrics, admission, sims, ffmpeg,
    models: new ModelRegistry(c.models), upstreams: new Upstreams(c.upstreams, simUrls) };
  const s = { ...base, billing: new Billing(base) } as Services;
  s.batches = new BatchWorker(s, batchEndpoints());
  metrics.ledgerWrites = () => settler.writes;
  metrics.keyLookups = () => cache.missLookups;
  metrics.openHolds = () => admission.openHolds.count;
  metrics.pendingDebits = () => committer.pending;
  metrics.retryingDebits = () => committer.retrying;
  metrics.commitFailures = () => committer.commitsFailed;
  metrics.parkedDebits = () => committer.parked;
  metrics.recoveredDebits = () => recovery.recovered;
  // Debits a dead process left durable but uncommitted: claimed now (an embedded restart replays
  // its journal before it serves) and then every second.
  await recovery.start();
  // Uploads a dead process left unfinished (an hour old: no live upload takes that long to store).
  await sweepUploads(db, 3_600_000).catch(() => undefined);
  // Every serve process runs the batch worker (batches.concurrency lines at once; 0 turns it off).
  s.batches.start();
  return s;
}

/** Drains what the stages hold (every debit committed, every hold released), then closes them. */
export async function closeServices(s: Services, deadline = Date.now() + 30_000): Promise<void> {
  await s.recovery.stop();
  await s.batches.stop(deadline);
  const committed = await s.committer.drain(deadline);
  await s.settler.drain();
  await Promise.all(s.admission.openHolds.releasing);
  s.billing.close();
  s.cache.stop();
  s.upstreams.close();
  await Promise.all(s.sims.map((x) => x.close()));
  // With debits still uncommitted (PostgreSQL unreachable), the Redis limiter leaves them owned by
  // this instance, for a live one to take over once this one's heartbeat stops.
  await s.limiter.close(committed);
  await s.db.close();
}

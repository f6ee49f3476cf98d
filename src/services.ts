// Builds and closes every stage of the gateway; owns the Services type. Nothing starts as a side effect of routing.
import { EventEmitter } from 'node:events';
import { join } from 'node:path';
import type { Config, UpstreamConfig } from './config.js';
import { openPglite, openPostgres, ping as pingDb, type Db } from './store/db.js';
import { StateCache } from './gate/cache.js';
import { MemoryLimiter } from './gate/limits/memory.js';
import { RedisLimiter } from './gate/limits/redis.js';
import type { Limiter } from './gate/limits/types.js';
import { makeSpares, type AdmissionDeps } from './gate/admission.js';
import { LocalView } from './gate/local-view.js';
import { Settler } from './ledger/settle.js';
import { DebitJournal } from './ledger/journal.js';
import { Committer } from './exchange/committer.js';
import { Recovery } from './exchange/recovery.js';
import { ModelRegistry } from './resolve/models.js';
import { Upstreams } from './proxy/upstream.js';
import { RedisUpstreamLimits } from './proxy/shared-limits.js';
import { startSim, type SimHandle } from './sim/index.js';
import { Metrics } from './observe/metrics.js';
import { Billing } from './billing/core.js';
import { BatchWorker } from './jobs/batch-worker.js';
import type { BatchEndpoints } from './exchange/client.js';
import { FileSweeper } from './jobs/file-sweeper.js';
import { findFfmpeg, type Ffmpeg } from './audio/ffmpeg.js';
import { log } from './observe/log.js';
import { Availability } from './observe/availability.js';
import { HealthMonitor, PooledUpstreamHealth, TcpUpstreamHealth, type UpstreamHealth } from './observe/health.js';
import { StatusBoard } from './observe/status.js';
import { OtlpExporter } from './observe/trace.js';
import { lastProviderCall } from './billing/core.js';
import { UnbilledLog } from './ledger/unbilled.js';
import { ReceiptSigner } from './ledger/receipt.js';
import { receiptKey } from './store/receipts.js';

/** The least time between two group commits' starts (ledger/settle.ts, Settler.schedule). */
const COMMIT_PACE_MS = 50;

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
  /** Deletes expired files and unfinished uploads. */
  fileSweeper: FileSweeper;
  /** The simulated upstreams this process runs for `upstreams.NAME.sim` (test infrastructure). */
  sims: SimHandle[];
  /** Debian's ffmpeg, found at start-up: converts speech to the formats src/audio cannot make (aac). */
  ffmpeg: Ffmpeg | undefined;
  /** Success and server-failure counts per status area (the hot path increments them). */
  availability: Availability;
  /** PostgreSQL, Redis, payments and upstreams as last probed or seen; the front end sets `draining`. */
  health: HealthMonitor;
  /** The status summary and health report built from the two above. */
  statusBoard: StatusBoard;
  /** The OTLP exporter when `telemetry.otlp_endpoint` is set; null: no trace is made at all. */
  tracer: OtlpExporter | null;
  /** Admitted requests that billed nothing (their free receipts), written in groups. */
  unbilled: UnbilledLog;
  /** Signs receipts with the key every instance on this database shares. */
  receipts: ReceiptSigner;
}

/** The debit journal of a process without Redis: in the data dir (PGlite's or, with PostgreSQL, its own). */
export function journalPath(dataDir: string): string {
  return join(dataDir, 'run', 'debits.journal');
}

/**
 * Opens every stage. `batchEndpoints` is what a batch line may run (the caller, cli.ts, takes it from the
 * family that serves batches): the services never import a family.
 */
export async function openServices(config: Config, dataDir: string, batchEndpoints: (s: Services) => BatchEndpoints): Promise<Services> {
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
  }, COMMIT_PACE_MS);
  const committer = new Committer(settler, limiter, db);
  const recovery = new Recovery(limiter, committer);
  const sims: SimHandle[] = [];
  const simUrls = new Map<string, string>();
  // A sim upstream is asked only for what it makes (its aac needs ffmpeg): Tollgate makes or refuses the rest.
  const upstreamConfigs = new Map(c.upstreams);
  for (const [name, u] of c.upstreams) {
    if (!u.sim) continue;
    const sim = await startSim({ host: '127.0.0.1', port: 0, tokenDelayMs: u.sim.tokenDelayMs, transcription: u.sim.transcription, ffmpeg: (await finding) ?? null });
    sims.push(sim);
    simUrls.set(name, sim.url);
    const formats = u.speech.formats.filter((f) => (sim.speechFormats as readonly string[]).includes(f));
    if (formats.length > 0) upstreamConfigs.set(name, { ...u, speech: { ...u.speech, formats } });
  }
  const maxTimeout = Math.max(...[...c.upstreams.values()].map((u) => u.timeoutMs));
  const admission: AdmissionDeps = {
    cache, limiter, metrics, defaultRpm: c.limits.defaultRpm, defaultConcurrency: c.limits.defaultConcurrency,
    holdTtlMs: maxTimeout + 60_000, allowOverdraft: c.limits.allowOverdraft, openHolds: { count: 0, releasing: new Set() },
    ...(limiter.kind === 'redis' && c.limits.overlapAdmission ? { localView: new LocalView(), overlap: { admitted: 0, refused: 0 } } : {}),
  };
  if (c.limits.spareHolds) admission.spares = makeSpares(admission);
  const ffmpeg = await finding;
  logSpeechFormats(c, upstreamConfigs, ffmpeg);
  // The receipt signing key: the database's, made by the first instance that starts on it.
  const receipts = new ReceiptSigner(await receiptKey(db, ReceiptSigner.generate));
  // With Redis, every instance shares each upstream's max_concurrency, rpm and Retry-After pause.
  const sharedLimits = c.redisUrl ? new RedisUpstreamLimits(c.redisUrl, c.redisPrefix) : undefined;
  await sharedLimits?.ready();
  const base = { config: c, events, db, cache, limiter, settler, committer, recovery, metrics, admission, sims, ffmpeg, unbilled: new UnbilledLog(db), receipts,
    models: new ModelRegistry(c.models), upstreams: new Upstreams(upstreamConfigs, simUrls, c.routing.maxAttempts, sharedLimits) };
  const s = { ...base, billing: new Billing(base) } as Services;
  openStatus(s, upstreamConfigs, simUrls);
  s.batches = new BatchWorker({
    db, batches: c.batches, maxLineBytes: c.limits.maxBodyBytes, modelId: (name) => s.models.find(name)?.id,
  }, batchEndpoints(s));
  metrics.ledgerWrites = () => settler.writes;
  metrics.keyLookups = () => cache.missLookups;
  metrics.openHolds = () => admission.openHolds.count;
  metrics.admissionOverlap = () => admission.overlap ?? null;
  metrics.spareHolds = () => admission.spares?.counts ?? null;
  metrics.pendingDebits = () => committer.pending;
  metrics.retryingDebits = () => committer.retrying;
  metrics.commitFailures = () => committer.commitsFailed;
  metrics.parkedDebits = () => committer.parked;
  metrics.recoveredDebits = () => recovery.recovered;
  metrics.upstreamHealth = () => s.upstreams.pools.health();
  s.upstreams.startProbes(c.models);
  // Debits a dead process left durable but uncommitted: claimed now (an embedded restart replays
  // its journal before it serves) and then every second.
  await recovery.start();
  s.health.start();
  // Expired files, and uploads a dead process left unfinished: swept now and every files sweep interval.
  s.fileSweeper = new FileSweeper(db, c.fileSweepMs);
  await s.fileSweeper.sweep();
  s.fileSweeper.start();
  // Every serve process runs the batch worker (batches.concurrency lines at once; 0 turns it off).
  s.batches.start();
  return s;
}

/** Drains what the stages hold (every debit committed, every hold released), then closes them. */
export async function closeServices(s: Services, deadline = Date.now() + 30_000): Promise<void> {
  await s.health.stop();
  await s.recovery.stop();
  await s.batches.stop(deadline);
  await s.fileSweeper.stop();
  const committed = await s.committer.drain(deadline);
  await s.settler.drain();
  await s.unbilled.flush();
  await s.admission.spares?.close();
  await Promise.all(s.admission.openHolds.releasing);
  s.billing.close();
  s.cache.stop();
  s.upstreams.close();
  await s.upstreams.pools.shared?.close();
  await Promise.all(s.sims.map((x) => x.close()));
  // With debits still uncommitted (PostgreSQL unreachable), the Redis limiter leaves them owned by
  // this instance, for a live one to take over once this one's heartbeat stops.
  await s.limiter.close(committed);
  await s.db.close();
  await s.tracer?.close();
}

/**
 * Availability counters, the dependency monitor, the status board and the trace exporter. Upstream
 * health is a plug (`UpstreamHealth`): a TCP connect to each upstream, joined with its pool's health (an ejected upstream is down).
 */
function openStatus(s: Services, upstreams: ReadonlyMap<string, UpstreamConfig>, simUrls: ReadonlyMap<string, string>, upstreamHealth?: UpstreamHealth): void {
  const c = s.config;
  const targets = new Map([...upstreams.keys()].map((n) => [n, upstreams.get(n)!.baseUrl ?? simUrls.get(n)!] as [string, string]).filter(([, u]) => Boolean(u)));
  const limiter = s.limiter;
  s.availability = new Availability();
  s.health = new HealthMonitor({
    postgres: s.db.kind === 'postgres' ? () => pingDb(s.db) : null,
    redis: limiter.ping ? () => limiter.ping!() : null,
    payments: () => (c.payments.provider === 'sandbox' ? null : lastProviderCall),
    upstreams: upstreamHealth ?? new PooledUpstreamHealth(new TcpUpstreamHealth(targets, Math.min(2000, c.status.probeMs)), () => s.upstreams.pools.health()),
    probeMs: c.status.probeMs, timeoutMs: Math.min(2000, c.status.probeMs),
  });
  const used = (kinds: readonly string[]) => {
    const pools = new Map(c.models.filter((m) => kinds.includes(m.kind)).map((m) => m.pool.map((e) => e.name)).map((p) => [p.join('\n'), p] as const));
    return [...pools.values()];
  };
  s.statusBoard = new StatusBoard({
    availability: s.availability, health: s.health,
    backlog: () => ({ pending: s.committer.pending, retrying: s.committer.retrying }),
    familyUpstreams: { alpha: used(['chat', 'embedding', 'tts', 'stt', 'realtime']), beta: used(['tts', 'stt', 'sts']) },
    lastReviewed: c.status.lastReviewed,
    pageUrl: () => `${c.publicUrl ?? ''}/status`,
  });
  s.tracer = c.telemetry.otlpEndpoint
    ? new OtlpExporter({ endpoint: c.telemetry.otlpEndpoint, serviceName: c.telemetry.serviceName, headers: c.telemetry.headers, maxQueue: 8192, batch: 512, intervalMs: 1000 })
    : null;
}

/**
 * What the start-up log says of the speech formats: with ffmpeg, the formats it converts to; without, which
 * speech upstreams still serve aac (they make it themselves) and on which it is refused (400).
 */
function logSpeechFormats(c: Config, upstreams: ReadonlyMap<string, UpstreamConfig>, ffmpeg: Ffmpeg | undefined): void {
  if (ffmpeg) { log('info', 'ffmpeg found: speech formats it converts to', { bin: ffmpeg.bin, formats: ffmpeg.formats }); return; }
  const speaking = [...new Set(c.models.filter((m) => m.kind === 'tts').map((m) => m.upstream))];
  const served = speaking.filter((n) => upstreams.get(n)?.speech.formats.includes('aac'));
  const refused = speaking.filter((n) => !served.includes(n));
  log('info', refused.length === 0 ? 'ffmpeg not found: every speech upstream makes aac itself'
    : `ffmpeg not found: aac speech is refused with 400 on ${refused.join(', ')} (${served.length ? `served by ${served.join(', ')}, which make it` : 'no upstream makes it'})`,
  { aac_refused: refused, aac_served_by: served });
}

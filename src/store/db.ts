// The one query layer: a pg Pool, pointed at PostgreSQL or at embedded PGlite through pglite-socket.
import { mkdirSync, rmSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startThread } from '../threads.js';
import pg from 'pg';
import { migrate } from './migrate.js';
import { PGLITE_CONF } from './pglite-conf.js';
import { compilingPgliteWithLiftoff } from './pglite-tier.js';
import type { PgliteWorkerData, PgliteWorkerMessage } from './pglite-worker.js';

// BIGINT comes back as bigint, never as a lossy number or a string.
pg.types.setTypeParser(20, (v: string) => BigInt(v));

export type Row = Record<string, unknown>;

export interface Queryable {
  query<R extends Row = Row>(sql: string | pg.QueryConfig, params?: unknown[]): Promise<pg.QueryResult<R>>;
}

export interface Db extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  tx<T>(fn: (c: Queryable) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

class PoolDb implements Db {
  constructor(readonly kind: 'postgres' | 'pglite', private readonly pool: pg.Pool, private readonly onClose: () => Promise<void>) {}

  query<R extends Row = Row>(sql: string | pg.QueryConfig, params?: unknown[]): Promise<pg.QueryResult<R>> {
    return typeof sql === 'string' ? this.pool.query<R>(sql, params as unknown[]) : this.pool.query<R>(sql);
  }

  async tx<T>(fn: (c: Queryable) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const out = await fn(client);
      await client.query('COMMIT');
      return out;
    } catch (e) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw e;
    } finally {
      client.release();
    }
  }

  async close(): Promise<void> {
    await this.pool.end();
    await this.onClose();
  }
}

export async function openPostgres(url: string, poolSize: number): Promise<Db> {
  const pool = new pg.Pool({ connectionString: url, max: poolSize });
  pool.on('error', () => undefined); // an idle client's error is reported on its next use
  const db = new PoolDb('postgres', pool, async () => undefined);
  await migrate(db);
  return db;
}

/** An embedded store was made in this data dir already (openPglite would open it rather than create one). */
export function embeddedStoreExists(dataDir: string): boolean {
  return existsSync(join(dataDir, 'pg', 'PG_VERSION'));
}

/**
 * Embedded PGlite in `dataDir/pg`, served on a unix socket inside the data dir so that `pg` speaks
 * to it like to any PostgreSQL. PGlite is single-session, so the pool holds one connection and
 * transactions never interleave. It runs on a worker thread of this process (loaded only there: a
 * PostgreSQL deployment never pays for the WASM build in memory), so its statements never hold the
 * event loop.
 */
export async function openPglite(dataDir: string): Promise<Db> {
  mkdirSync(dataDir, { recursive: true });
  const pgDir = join(dataDir, 'pg');
  // A new data directory is created in a child process: initdb leaves ~600 MB of WASM memory behind in
  // the process that runs it, and this process is the long-lived gateway.
  if (!existsSync(join(pgDir, 'PG_VERSION'))) {
    await promisify(execFile)(process.execPath, [fileURLToPath(new URL('./pglite-init.js', import.meta.url)), pgDir]);
  }
  const sockDir = join(dataDir, 'run');
  mkdirSync(sockDir, { recursive: true, mode: 0o700 });
  const sockPath = join(sockDir, '.s.PGSQL.5432');
  if (existsSync(sockPath)) rmSync(sockPath); // a stale socket from a killed process; the data-dir lock guards liveness
  const stop = await startPgliteWorker({ pgDir, sockPath, conf: PGLITE_CONF });
  const pool = new pg.Pool({ host: sockDir, port: 5432, user: 'postgres', database: 'postgres', max: 1 });
  pool.on('error', () => undefined);
  // PGlite keeps one session for every socket connection: a connection that replaces a lost one starts
  // without the statements its predecessor prepared, as a new PostgreSQL session would (else every
  // named statement, the settle's among them, failed from then on with "already exists").
  pool.on('connect', (client) => { client.query('DEALLOCATE ALL').catch(() => undefined); });
  const db = new PoolDb('pglite', pool, stop);
  try {
    await migrate(db);
  } catch (e) {
    await db.close().catch(() => undefined);
    throw e;
  }
  return db;
}

/**
 * Starts PGlite and its socket server on a worker thread (store/pglite-worker.ts); resolves once it
 * serves, with the function that stops it (the database closed cleanly, then the thread gone).
 */
async function startPgliteWorker(data: PgliteWorkerData): Promise<() => Promise<void>> {
  // A small young generation: the thread's own JavaScript is only PGlite's wrapper and the socket's buffers,
  // and V8's default new space grows to two 16 MB semi-spaces that stay resident (docs/benchmarks.md).
  // The thread compiles PGlite's WebAssembly before it says ready: with V8's baseline compiler alone (pglite-tier.ts).
  const { worker, exited } = await compilingPgliteWithLiftoff(async () => {
    const w = startThread(new URL('./pglite-worker.js', import.meta.url), { workerData: data, resourceLimits: { maxYoungGenerationSizeMb: 4 } });
    const gone = new Promise<void>((resolve) => w.once('exit', () => resolve()));
    await new Promise<void>((resolve, reject) => {
      w.once('message', (m: PgliteWorkerMessage) => {
        if (m.type === 'ready') resolve();
        else reject(new Error(`the embedded store did not open: ${m.type === 'failed' ? m.error : m.type}`));
      });
      w.once('error', reject);
      void gone.then(() => reject(new Error('the embedded store\'s thread exited before it served')));
    });
    return { worker: w, exited: gone };
  });
  // A thread that failed after it served leaves the pool's queries failing: the store is reported unreachable.
  worker.on('error', () => undefined);
  return async () => {
    worker.postMessage('stop');
    await Promise.race([exited, new Promise<void>((resolve) => worker.once('message', () => resolve()))]);
    await worker.terminate();
  };
}

/** A round trip to the database (`SELECT 1`): the health probe's check that PostgreSQL answers. */
export async function ping(db: Queryable): Promise<void> {
  await db.query('SELECT 1');
}

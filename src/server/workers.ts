// `workers: N`: N gateway processes on one port (SO_REUSEPORT, which uWS sets), so one host uses
// more than one core. Each worker is a whole instance on the shared PostgreSQL + Redis, exactly as
// separate machines would be; the primary only starts, restarts and stops them.
import cluster, { type Worker } from 'node:cluster';
import net from 'node:net';
import { SANDBOX_SECRET_ENV } from '../config.js';
import { log } from '../observe/log.js';

/** Set in a worker's environment: the port every worker listens on. */
const WORKER_PORT_ENV = 'TOLLGATE_WORKER_PORT';
const READY = 'tollgate-ready';

export function isWorker(): boolean {
  return cluster.isWorker;
}

/** In a worker: the port the primary chose for all of them. */
export function workerPort(): number {
  return Number(process.env[WORKER_PORT_ENV]);
}

/** In a worker: tells the primary this worker is serving. */
export function reportReady(): void {
  process.send?.({ type: READY });
}

/**
 * Starts `count` workers on `host:port`; port 0 means a free port, chosen here, because uWS sets
 * SO_REUSEPORT only on a named port. Resolves with the port once all are serving. A worker that
 * dies after it was serving is replaced, unless workers keep dying (more than 5 in a minute): then
 * the primary stops everything and exits. One that dies before it serves fails the start.
 */
export async function startWorkers(count: number, host: string, configuredPort: number, sandboxSecret: string): Promise<{ port: number; stop(): Promise<void> }> {
  const port = configuredPort || await freePort(host);
  let stopping = false;
  const deaths: number[] = [];
  const live = new Set<Worker>();

  const onDeath = (w: Worker, code: number | null, signal: string | null) => {
    if (stopping) return;
    log('error', 'worker died', { pid: w.process.pid, code, signal });
    const now = Date.now();
    deaths.push(now);
    while (deaths.length > 0 && deaths[0]! < now - 60_000) deaths.shift();
    if (deaths.length > 5) {
      log('error', 'workers keep dying: stopping', {});
      void stopAll().then(() => process.exit(1));
      return;
    }
    fork().catch((e: unknown) => log('error', 'worker restart failed', { error: String(e) }));
  };

  const fork = (): Promise<Worker> => new Promise((resolve, reject) => {
    const w = cluster.fork({ [SANDBOX_SECRET_ENV]: sandboxSecret, [WORKER_PORT_ENV]: String(port) });
    live.add(w);
    w.once('exit', () => live.delete(w));
    const onEarlyExit = (code: number | null) => reject(new Error(`worker exited with code ${code} before it was serving`));
    const onMessage = (m: { type?: unknown }) => {
      if (m?.type !== READY) return;
      w.off('message', onMessage);
      w.off('exit', onEarlyExit);
      w.once('exit', (code: number | null, signal: string | null) => onDeath(w, code, signal));
      resolve(w);
    };
    w.on('message', onMessage);
    w.once('exit', onEarlyExit);
  });

  const stopAll = async (): Promise<void> => {
    stopping = true;
    await Promise.all([...live].map((w) => new Promise<void>((resolve) => {
      if (w.isDead()) { resolve(); return; }
      w.once('exit', () => resolve());
      w.process.kill('SIGTERM');
    })));
  };

  try {
    await Promise.all(Array.from({ length: count }, fork));
  } catch (e) {
    await stopAll();
    throw e;
  }
  return { port, stop: stopAll };
}

function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

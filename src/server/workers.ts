// `workers: N`: N gateway processes on one port (SO_REUSEPORT, which uWS sets), so one host uses
// more than one core. Each worker is a whole instance on the shared PostgreSQL + Redis, exactly as
// separate machines would be; the primary only starts, restarts and stops them.
import cluster, { type Worker } from 'node:cluster';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { log } from './log.js';

/** Set in a worker's environment: the port every worker listens on. */
export const WORKER_PORT_ENV = 'TOLLGATE_WORKER_PORT';
/** The sandbox's webhook secret, shared so any worker verifies what another signed. */
export const SANDBOX_SECRET_ENV = 'TOLLGATE_SANDBOX_WEBHOOK_SECRET';

export interface WorkerReady { type: 'tollgate-ready'; port: number }

export function isWorker(): boolean {
  return cluster.isWorker;
}

/** In a worker: tells the primary this worker is serving. */
export function reportReady(port: number): void {
  process.send?.({ type: 'tollgate-ready', port } satisfies WorkerReady);
}

/**
 * Starts `count` workers on `host:port`; port 0 means a free port, chosen here, because uWS sets
 * SO_REUSEPORT only on a named port. Resolves with the port once all are serving. A worker that dies is replaced,
 * unless workers keep dying (more than 5 in a minute): then the primary stops everything and exits.
 */
export async function startWorkers(count: number, host: string, configuredPort: number): Promise<{ port: number; stop(): Promise<void> }> {
  const secret = process.env[SANDBOX_SECRET_ENV] ?? `whsec_sandbox_${randomBytes(24).toString('hex')}`;
  const port = configuredPort || await freePort(host);
  let stopping = false;
  const deaths: number[] = [];
  const live = new Set<Worker>();

  const fork = (): Promise<Worker> => new Promise((resolve, reject) => {
    const w = cluster.fork({ [SANDBOX_SECRET_ENV]: secret, [WORKER_PORT_ENV]: String(port) });
    live.add(w);
    const onMessage = (m: WorkerReady) => {
      if (m?.type !== 'tollgate-ready') return;
      w.off('message', onMessage);
      w.off('exit', onEarlyExit);
      resolve(w);
    };
    const onEarlyExit = (code: number | null) => { live.delete(w); reject(new Error(`worker exited with code ${code} before it was serving`)); };
    w.on('message', onMessage);
    w.once('exit', onEarlyExit);
    w.once('exit', (code, signal) => {
      live.delete(w);
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
    });
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

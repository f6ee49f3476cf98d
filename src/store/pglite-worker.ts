// The embedded PGlite and its socket server, on a worker thread of the gateway's process: PostgreSQL
// compiled to WASM runs each statement synchronously, so on the main thread a group commit held every
// request for its whole length. Here it runs beside the event loop, on the other core (openPglite).
import { parentPort, workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

/** What openPglite hands the worker: the data directory, the unix socket to serve and PostgreSQL's settings. */
export interface PgliteWorkerData { pgDir: string; sockPath: string; conf: string[] }

/** Messages to the parent: serving, stopped, or the error that stopped the start. */
export type PgliteWorkerMessage = { type: 'ready' } | { type: 'stopped' } | { type: 'failed'; error: string };

const port = parentPort;
if (!port) throw new Error('pglite-worker.js runs as a worker thread (openPglite starts it)');
const { pgDir, sockPath, conf } = workerData as PgliteWorkerData;
const send = (m: PgliteWorkerMessage): void => port.postMessage(m);

try {
  const pglite = await PGlite.create(pgDir, { postgresqlconf: conf });
  // The gateway's pool holds one connection; a second is only its replacement, arriving before this thread
  // has seen the old one close (with 1 it was reset: ECONNRESET).
  const server = new PGLiteSocketServer({ db: pglite, path: sockPath, maxConnections: 2 });
  await server.start();
  // The one message the parent sends: stop serving and close the database cleanly, then say so.
  port.once('message', () => {
    void (async () => {
      try {
        await server.stop();
        await pglite.close();
      } finally {
        send({ type: 'stopped' });
        port.close();
      }
    })();
  });
  send({ type: 'ready' });
} catch (e) {
  send({ type: 'failed', error: e instanceof Error ? e.message : String(e) });
  port.close();
}

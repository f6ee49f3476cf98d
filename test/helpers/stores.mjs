// A PostgreSQL cluster and a redis-server of a test's own, on free ports, that the test may stop and start (the shared ones are never touched).
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, chownSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { Redis } from '../../node_modules/ioredis/built/index.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const PG_BIN = execFileSync('bash', ['-c', 'ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1']).toString().trim();

export function freePort() {
  return new Promise((resolve) => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); }); });
}

/** A redis-server of the test's own, on its own port, with an append-only file so a restart keeps its data. */
export async function privateRedis(t) {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'tg-redis-'));
  let proc = null;
  const r = {
    url: `redis://127.0.0.1:${port}`,
    async start() {
      proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir], { stdio: 'ignore' });
      const c = new Redis(r.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      c.on('error', () => undefined);
      for (let i = 0; i < 100; i++) { try { await c.connect(); await c.ping(); break; } catch { await sleep(50); } }
      c.disconnect();
    },
    kill() { proc?.kill('SIGKILL'); proc = null; },
  };
  await r.start();
  t.after(() => { r.kill(); rmSync(dir, { recursive: true, force: true }); });
  return r;
}

/** A PostgreSQL cluster of the test's own (initdb as the postgres user), on its own port. */
export async function privatePostgres(t) {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'tg-pg-'));
  const id = (flag) => Number(execFileSync('id', [flag, 'postgres']).toString().trim());
  chownSync(dir, id('-u'), id('-g'));
  const asPg = (cmd, args) => execFileSync('runuser', ['-u', 'postgres', '--', join(PG_BIN, cmd), ...args], { stdio: 'ignore' });
  asPg('initdb', ['-D', join(dir, 'data'), '-A', 'trust', '-U', 'postgres']);
  const p = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    start() { asPg('pg_ctl', ['-D', join(dir, 'data'), '-w', '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`, '-l', join(dir, 'log'), 'start']); },
    stop() { asPg('pg_ctl', ['-D', join(dir, 'data'), '-m', 'immediate', 'stop']); },
  };
  p.start();
  t.after(() => { try { p.stop(); } catch { /* already stopped */ } rmSync(dir, { recursive: true, force: true }); });
  return p;
}

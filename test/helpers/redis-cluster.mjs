// Starts throwaway Redis topologies (own redis-server processes in a temp dir, free ports): a three-master Cluster, a Sentinel-watched master.
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** True if nothing listens on 127.0.0.1:port. */
function free(port) {
  return new Promise((resolve) => {
    const s = createServer().once('error', () => resolve(false)).listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A port P with P and P + 10000 (its cluster bus) free. */
async function freeClusterPort(taken) {
  for (;;) {
    const p = 20000 + Math.floor(Math.random() * 10000);
    if (!taken.has(p) && await free(p) && await free(p + 10000)) { taken.add(p); return p; }
  }
}

/**
 * Three `redis-server --cluster-enabled yes` masters joined by `redis-cli --cluster create` (no replicas).
 * Returns { url: 'redis+cluster://…', ports, stop() }; stop() kills the processes (by their pids) and removes the dir.
 */
export async function startRedisCluster() {
  const dir = mkdtempSync(join(tmpdir(), 'tg-cluster-'));
  const taken = new Set();
  const ports = [];
  for (let i = 0; i < 3; i++) ports.push(await freeClusterPort(taken));
  const procs = ports.map((port) => spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--cluster-enabled', 'yes',
    '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--dir', dir, '--dbfilename', `dump-${port}.rdb`, '--save', '', '--appendonly', 'no',
    '--cluster-node-timeout', '5000', '--logfile', join(dir, `${port}.log`)], { stdio: 'ignore' }));
  const stop = async () => {
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    await Promise.all(procs.map((p) => (p.exitCode === null && p.signalCode === null ? new Promise((r) => p.once('exit', r)) : undefined)));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (const port of ports) {
      for (let i = 0; ; i++) {
        try { await run('redis-cli', ['-p', String(port), 'ping']); break; } catch (e) { if (i > 100) throw e; await sleep(50); }
      }
    }
    await run('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0', '--cluster-yes']);
    // Every node must see every slot covered before a client routes by its slot map.
    for (const port of ports) {
      for (let i = 0; ; i++) {
        const { stdout } = await run('redis-cli', ['-p', String(port), 'cluster', 'info']);
        if (/cluster_state:ok/.test(stdout) && /cluster_known_nodes:3/.test(stdout)) break;
        if (i > 200) throw new Error(`cluster not ok on ${port}: ${stdout}`);
        await sleep(50);
      }
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { url: `redis+cluster://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`, ports, procs, stop };
}

/**
 * One redis-server master watched by one sentinel (`redis-server sentinel.conf --sentinel`) that names it `mymaster`.
 * Returns { url: 'redis+sentinel://…/mymaster', masterPort, stop() }.
 */
export async function startRedisSentinel() {
  const dir = mkdtempSync(join(tmpdir(), 'tg-sentinel-'));
  const taken = new Set();
  const [masterPort, sentinelPort] = [await freeClusterPort(taken), await freeClusterPort(taken)];
  writeFileSync(join(dir, 'sentinel.conf'), `port ${sentinelPort}\nbind 127.0.0.1\ndir ${dir}\nsentinel monitor mymaster 127.0.0.1 ${masterPort} 1\n`);
  const procs = [
    spawn('redis-server', ['--port', String(masterPort), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' }),
    spawn('redis-server', [join(dir, 'sentinel.conf'), '--sentinel'], { stdio: 'ignore' }),
  ];
  const stop = async () => {
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    await Promise.all(procs.map((p) => (p.exitCode === null && p.signalCode === null ? new Promise((r) => p.once('exit', r)) : undefined)));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; ; i++) {
      try {
        const { stdout } = await run('redis-cli', ['-p', String(sentinelPort), 'sentinel', 'get-master-addr-by-name', 'mymaster']);
        if (stdout.includes(String(masterPort))) break;
      } catch (e) { if (i > 100) throw e; }
      if (i > 100) throw new Error('the sentinel does not name the master');
      await sleep(50);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { url: `redis+sentinel://127.0.0.1:${sentinelPort}/mymaster`, masterPort, stop };
}

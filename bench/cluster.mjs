// Two gateway instances on a three-node Redis Cluster against two on one Redis (both started here), one PostgreSQL: throughput, latency, Redis CPU.
// Usage: node bench/cluster.mjs [seconds per round (8)] [concurrency (32)] [rounds (2)]  (after npm run build; needs PostgreSQL and redis-server)
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startGateway, freshDatabase, bearer, chatBody } from '../test/helpers/gateway.mjs';
import { startRedisCluster } from '../test/helpers/redis-cluster.mjs';
import { usage, percentiles } from './lib.mjs';

const [SECONDS, CONC, ROUNDS] = [Number(process.argv[2] ?? 8), Number(process.argv[3] ?? 32), Number(process.argv[4] ?? 2)];
const ACCOUNTS = 8;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One redis-server on a free port (its own, never the shared one). */
async function startSingle() {
  const dir = mkdtempSync(join(tmpdir(), 'tg-single-'));
  const port = 30000 + Math.floor(Math.random() * 5000);
  const p = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
  await sleep(300);
  return { url: `redis://127.0.0.1:${port}`, procs: [p], stop: async () => { p.kill('SIGKILL'); await new Promise((r) => p.once('exit', r)); rmSync(dir, { recursive: true, force: true }); } };
}

/** A fake node:test context for the test helper: cleanups run by `close()`. */
function ctx() {
  const fns = [];
  return { after: (f) => fns.push(f), diagnostic: () => undefined, close: async () => { for (const f of fns.reverse()) await f(); } };
}

async function round(label, redis) {
  const t = ctx();
  const db = await freshDatabase();
  const o = { store: 'postgres', database: db, redis: true, redisUrl: redis.url, redisPrefix: `tgbench:${randomBytes(4).toString('hex')}:`, upstreams: { sim: { sim: { token_delay_ms: 0 } } } };
  try {
    const gws = [await startGateway(t, o), await startGateway(t, o)];
    const keys = [];
    for (let i = 0; i < ACCOUNTS; i++) keys.push((await gws[0].account('1000', { rpm: 1_000_000, concurrency: 10_000 })).key);
    const body = chatBody({ max_tokens: 16 });
    const warmUntil = Date.now() + 1000;
    const lat = [];
    let errors = 0;
    const go = async (until, record) => Promise.all(Array.from({ length: CONC }, async (_, c) => {
      for (let n = 0; Date.now() < until; n++) {
        const t0 = process.hrtime.bigint();
        const r = await gws[(c + n) % 2].fetch('/v1/chat/completions', { method: 'POST', headers: bearer(keys[(c + n) % ACCOUNTS]), body });
        await r.arrayBuffer();
        if (!record) continue;
        if (r.status !== 200) errors++;
        else lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
    }));
    await go(warmUntil, false);
    const cpu0 = redis.procs.reduce((s, p) => s + usage(p.pid).cpu, 0);
    const t0 = Date.now();
    await go(t0 + SECONDS * 1000, true);
    const secs = (Date.now() - t0) / 1000;
    const redisCpu = redis.procs.reduce((s, p) => s + usage(p.pid).cpu, 0) - cpu0;
    const p = percentiles(lat);
    const row = { label, rps: Math.round(lat.length / secs), p50: p.p50, p99: p.p99, errors, redis_cpu_us_per_req: Math.round(redisCpu * 1e6 / lat.length) };
    console.log(JSON.stringify(row));
    return row;
  } finally {
    await t.close();
    await db.drop();
  }
}

const single = await startSingle();
const cluster = await startRedisCluster();
try {
  console.log(`two gateways, ${ACCOUNTS} accounts, ${CONC} client loops alternating instances, ${SECONDS} s a round, buffered chat (max_tokens 16) on the sim with no token delay`);
  for (let r = 0; r < ROUNDS; r++) {
    await round('one Redis', single);
    await round('Cluster (3 masters)', cluster);
  }
} finally {
  await single.stop();
  await cluster.stop();
}

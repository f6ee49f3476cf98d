// Upstream pools (issue 27): one model on two sim upstreams with one killed -9 mid-run (errors, p99 around the switch), and the pool's hot-path cost.
// Usage: node bench/pools.mjs [seconds=10] [concurrency=16] [pick]   (PGlite store; prints one JSON object)
//   `pick`: the in-process pick cost alone (with the shared upstream limits on TOLLGATE_BENCH_REDIS, default redis://127.0.0.1:6379).
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { execFile } from 'node:child_process';
import { start, stop, percentiles, ROOT } from './lib.mjs';
import { Pools } from '../dist/proxy/pool.js';
import { RedisUpstreamLimits } from '../dist/proxy/shared-limits.js';
import { embeddedConfig } from '../dist/config.js';

const run = promisify(execFile);
const CLI = join(ROOT, 'dist', 'cli.js');
const SECONDS = Number(process.argv[2] ?? 10);
const C = Number(process.argv[3] ?? 16);
const chat = (id, upstream) => ({ id, upstream, upstream_model: 'sim-chat', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 });
const body = (model) => JSON.stringify({ model, max_tokens: 8, messages: [{ role: 'user', content: 'Say hello to the gateway.' }] });

/** In-process: one acquire + release of a pool of one and of two, in µs (the pick, health and limit checks alone). */
async function pickCost() {
  const base = embeddedConfig().upstreams.get('sim');
  const cfgs = new Map([['a', { ...base, name: 'a' }], ['b', { ...base, name: 'b' }]]);
  const pools = new Pools(cfgs);
  const one = [{ name: 'a', weight: 1, priority: 0, upstreamModel: 'm' }];
  const two = [...one, { name: 'b', weight: 1, priority: 0, upstreamModel: 'm' }];
  const tried = new Set();
  const time = async (pool, n) => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) (await pools.acquire(pool, tried, Infinity, () => false)).release();
    return Number(process.hrtime.bigint() - t0) / 1000 / n;
  };
  await time(one, 20_000); await time(two, 20_000);
  const out = { one_upstream_us: +(await time(one, 200_000)).toFixed(3), pool_of_two_us: +(await time(two, 200_000)).toFixed(3) };
  // With Redis: an upstream with no limit (must cost nothing more) and one with max_concurrency and rpm
  // (one script to take a slot, one command to give it back), one acquire + release at a time.
  const prefix = `tgbench:${process.pid}:`;
  const shared = new RedisUpstreamLimits(process.env.TOLLGATE_BENCH_REDIS ?? 'redis://127.0.0.1:6379', prefix);
  await shared.ready();
  const sharedPools = new Pools(new Map([['a', { ...base, name: 'a' }], ['c', { ...base, name: 'c', maxConcurrency: 64, rpm: 100_000_000 }]]), Date.now, shared);
  const timeShared = async (pool, n) => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) (await sharedPools.acquire(pool, tried, Infinity, () => false)).release();
    return Number(process.hrtime.bigint() - t0) / 1000 / n;
  };
  const capped = [{ name: 'c', weight: 1, priority: 0, upstreamModel: 'm' }];
  await timeShared(one, 20_000); await timeShared(capped, 2_000);
  out.redis_unlimited_us = +(await timeShared(one, 200_000)).toFixed(3);
  const calls = shared.calls;
  const cpu0 = process.cpuUsage();
  out.redis_limited_us = +(await timeShared(capped, 20_000)).toFixed(3);
  const cpu = process.cpuUsage(cpu0);
  out.redis_limited_cpu_us = +((cpu.user + cpu.system) / 20_000).toFixed(3);
  out.redis_calls_per_limited_request = (shared.calls - calls) / 20_000;
  await shared.close();
  return out;
}

/** Sequential requests alternating between a model on one upstream and a model on a pool of two: p50/p99 of each, µs. */
async function sequential(base, auth, n = 1500) {
  const lat = { single: [], pooled: [] };
  for (let i = 0; i < n * 2; i++) {
    const which = i % 2 === 0 ? 'single' : 'pooled';
    const t0 = process.hrtime.bigint();
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: auth, body: body(which === 'single' ? 'm-single' : 'm-pool') });
    await r.arrayBuffer();
    if (i >= 200) lat[which].push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return { single: percentiles(lat.single), pooled: percentiles(lat.pooled) };
}

/** C loops of buffered chats on the pool for SECONDS; sim `a` is killed -9 at 40% of the run. */
async function failover(base, auth, victim) {
  const recs = [];
  const t0 = Date.now();
  const killAt = t0 + SECONDS * 400;
  setTimeout(() => { try { process.kill(-victim.pid, 'SIGKILL'); } catch { /* gone */ } }, killAt - t0);
  await Promise.all(Array.from({ length: C }, async () => {
    while (Date.now() < t0 + SECONDS * 1000) {
      const at = Date.now();
      const h0 = process.hrtime.bigint();
      let status;
      try { const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: auth, body: body('m-pool') }); await r.arrayBuffer(); status = r.status; } catch { status = 0; }
      recs.push({ at, ms: Number(process.hrtime.bigint() - h0) / 1e6, ok: status === 200 });
    }
  }));
  const slice = (from, to) => {
    const r = recs.filter((x) => x.at >= from && x.at < to);
    const errors = r.filter((x) => !x.ok).length;
    return { requests: r.length, errors, error_rate: r.length ? +(errors / r.length).toFixed(4) : 0, p50_ms: percentiles(r.map((x) => x.ms)).p50, p99_ms: percentiles(r.map((x) => x.ms)).p99 };
  };
  return { before_kill: slice(t0, killAt), switch_first_second: slice(killAt, killAt + 1000), after: slice(killAt + 1000, Infinity), whole_run: slice(0, Infinity) };
}

if (process.argv[4] === 'pick') {
  console.log(JSON.stringify({ pick: await pickCost() }, null, 2));
  process.exit(0);
}
const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-pools-'));
const procs = [];
try {
  const sims = [];
  for (const n of ['a', 'b']) {
    const p = await start(`sim-${n}`, process.execPath, [CLI, 'sim', '--listen', '127.0.0.1:0', '--token-delay-ms', '0'], { ready: /"url":"(http:[^"]+)"/ });
    procs.push(p); sims.push(p);
  }
  const health = { eject_ms: 60_000 };
  const config = {
    listen: '127.0.0.1:0',
    upstreams: { a: { base_url: sims[0].match[1], health }, b: { base_url: sims[1].match[1], health }, solo: { base_url: sims[1].match[1] } },
    models: [chat('m-single', 'solo'), chat('m-pool', ['a', 'b'])],
    limits: { default_rpm: 1_000_000, default_concurrency: 1000 }, payments: { provider: 'sandbox', allow_sandbox: true },
  };
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify(config));
  const gw = await start('tollgate', process.execPath, [CLI, 'serve', '--config', cfg, '--data-dir', dir], { env: { TOLLGATE_LOG_REQUESTS: '0' }, ready: /"base_url":"(http:[^"]+)"/ });
  procs.push(gw);
  const base = gw.match[1];
  const cli = async (...a) => JSON.parse((await run(process.execPath, [CLI, ...a, '--json', '--config', cfg, '--data-dir', dir])).stdout);
  const acct = await cli('account', 'create', '--email', `bench${Date.now()}@example.com`, '--credit', '1000');
  const { key } = await cli('key', 'create', '--account', acct.account_id);
  const auth = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const out = { seconds: SECONDS, concurrency: C, pick: await pickCost() };
  out.sequential = await sequential(base, auth);
  out.failover = await failover(base, auth, sims[0]);
  console.log(JSON.stringify(out, null, 2));
} finally {
  for (const p of procs.reverse()) await stop(p);
  rmSync(dir, { recursive: true, force: true });
}

// The profile harness: one gateway (embedded or PostgreSQL + Redis) before `sim` at 0 ms, a fixed number of chat requests at max rate; gateway CPU µs per request from /proc, optionally a --cpu-prof.
import { mkdtempSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { ROOT, start, stop, usage, autocannon } from './lib.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const CLI = resolve(opt('--cli', join(ROOT, 'dist/cli.js')));
const STORE = opt('--store', 'embedded'); // embedded | pg
const REQUESTS = Number(opt('--requests', '20000'));
const ROUNDS = Number(opt('--rounds', '3'));
const CONNECTIONS = opt('--connections', '128');
const CPU_PROF = opt('--cpu-prof', null); // a directory: the gateway runs with --cpu-prof into it
const LIMITS = JSON.parse(opt('--limits', '{}')); // merged into the config's limits, e.g. '{"overlap_admission":false}'
const HEAP_PROF = opt('--heap-prof', null); // a directory: the gateway runs with --heap-prof into it (sampled allocations still live at exit: what is retained, not the allocation rate)
const PG_ADMIN = process.env.TOLLGATE_BENCH_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS = process.env.TOLLGATE_BENCH_REDIS ?? 'redis://127.0.0.1:6379';
const CHAT = JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'Hello, how are you today?' }], max_tokens: 16 });

const work = mkdtempSync(join(tmpdir(), 'tollgate-prof-'));
const procs = [];
let db = null;

async function main() {
  const sim = await start('sim', process.execPath, [CLI, 'sim', '--listen', '127.0.0.1:0', '--token-delay-ms', '0'], { ready: /"url":"(http:[^"]+)"/ });
  procs.push(sim);
  const env = { TOLLGATE_LOG_REQUESTS: '0' };
  const config = {
    listen: '127.0.0.1:0',
    limits: { default_rpm: 1_000_000_000, default_concurrency: 1_000_000, ...LIMITS },
    payments: { provider: 'sandbox', allow_sandbox: true },
    upstreams: { sim: { base_url: sim.match[1] } },
    models: [{ id: 'sim-chat', upstream: 'sim', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }],
  };
  if (STORE === 'pg') {
    db = `tg_prof_${process.pid}`;
    execFileSync('psql', [PG_ADMIN, '-qc', `DROP DATABASE IF EXISTS ${db}`, '-c', `CREATE DATABASE ${db}`], { stdio: 'ignore' });
    env.TG_BENCH_DB = PG_ADMIN.replace(/\/[^/]*$/, `/${db}`);
    env.TG_BENCH_REDIS = REDIS;
    config.database = { url_env: 'TG_BENCH_DB', pool_size: 8 };
    config.redis = { url_env: 'TG_BENCH_REDIS', key_prefix: `tgprof${process.pid}:` };
  }
  const dir = join(work, 'gw');
  mkdirSync(dir, { recursive: true });
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify(config));
  const nodeArgs = CPU_PROF ? ['--cpu-prof', '--cpu-prof-dir', resolve(CPU_PROF)] : HEAP_PROF ? ['--heap-prof', '--heap-prof-dir', resolve(HEAP_PROF)] : [];
  const gw = await start('gateway', process.execPath, [...nodeArgs, CLI, 'serve', '--config', cfg, '--data-dir', dir], { env, ready: /"base_url":"(http:[^"]+)"/ });
  procs.push(gw);
  const cli = (...a) => JSON.parse(execFileSync(process.execPath, [CLI, ...a, '--json', '--config', cfg, '--data-dir', dir], { env: { ...process.env, ...env } }).toString());
  const acct = cli('account', 'create', '--email', 'prof@prof.local', '--credit', '1000000');
  const key = cli('key', 'create', '--account', acct.account_id, '--rpm', '1000000000', '--concurrency', '1000000').key;
  const url = `${gw.match[1]}/v1/chat/completions`;
  const ac = (n) => autocannon(['-m', 'POST', '-H', 'content-type=application/json', '-H', `authorization=Bearer ${key}`, '-b', CHAT, '-c', CONNECTIONS, '-a', String(n), url]);
  await ac(Math.min(REQUESTS, 5000)); // warm up
  const rounds = [];
  for (let i = 0; i < ROUNDS; i++) {
    const before = usage(gw.pid).cpu;
    const t0 = process.hrtime.bigint();
    const r = await ac(REQUESTS);
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpu = usage(gw.pid).cpu - before;
    const done = r['2xx'];
    rounds.push({ cpu_us_per_req: Math.round((cpu / done) * 1e6), qps: Math.round(done / secs), non2xx: r.non2xx, errors: r.errors });
  }
  const idle = usage(gw.pid).rss;
  console.log(JSON.stringify({ cli: CLI, store: STORE, requests: REQUESTS, rounds, rss_mb: Math.round(idle / 1e5) / 10 }));
}

try {
  await main();
} finally {
  for (const p of procs.reverse()) await stop(p);
  if (db) execFileSync('psql', [PG_ADMIN, '-qc', `DROP DATABASE IF EXISTS ${db}`], { stdio: 'ignore' });
  rmSync(work, { recursive: true, force: true });
}

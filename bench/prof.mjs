// The profile harness: one gateway (embedded or PostgreSQL + Redis) before `sim` at 0 ms, a fixed number of chat requests at max rate; gateway CPU µs per request from /proc, optionally a --cpu-prof.
// --sequential N: instead, N requests one at a time over one keep-alive socket (after 300 to warm up), each round
// reporting the client's p50/p90/p99 and the gateway's CPU per request (what one request at a time costs it); with
// --load R, beside a steady load of R chat requests a second (bench/paced.mjs), whose CPU the per-request figure then includes.
import { mkdtempSync, writeFileSync, mkdirSync, rmSync, readFileSync, readdirSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import http from 'node:http';
import { ROOT, start, stop, usage, autocannon } from './lib.mjs';
import { clearRedisPrefix } from '../test/helpers/gateway.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const CLI = resolve(opt('--cli', join(ROOT, 'dist/cli.js')));
const STORE = opt('--store', 'embedded'); // embedded | pg
const REQUESTS = Number(opt('--requests', '20000'));
const ROUNDS = Number(opt('--rounds', '3'));
const CONNECTIONS = opt('--connections', '128');
const SEQUENTIAL = Number(opt('--sequential', '0'));
const LOAD = Number(opt('--load', '0')); // with --sequential: a steady load of this many chat requests a second beside it (bench/paced.mjs)
const CPU_PROF = opt('--cpu-prof', null); // a directory: the gateway runs with --cpu-prof into it
const LIMITS = JSON.parse(opt('--limits', '{}')); // merged into the config's limits, e.g. '{"overlap_admission":false}'
const NODE_ARGS = opt('--node-args', '').split(/\s+/).filter(Boolean); // extra Node/V8 options for the gateway, e.g. '--wasm-tiering-budget=100000000'
const GAP_MS = Number(opt('--gap-ms', '0')); // with --sequential: a pause between one request's reply and the next (a client that thinks, as bench/run's probe does every 5 ms); 0: back to back
const TAIL = opt('--tail', null); // with --sequential: a file for every request's timing beside the gateway's GCs, queries, Redis commands and upstream calls (bench/tail-hooks.cjs), and what the slowest 1% overlapped
const HEAP_PROF = opt('--heap-prof', null); // a directory: the gateway runs with --heap-prof into it (sampled allocations still live at exit: what is retained, not the allocation rate)
const GATEWAY_NODE = opt('--gateway-node', process.execPath); // the Node binary the gateway runs on (test/node-versions 24 prints one); sim and the load stay on this one
const FRONTEND = opt('--frontend', null); // the config's frontend (auto | uws | node); unset: auto
const QUIET_S = Number(opt('--quiet-s', '0')); // after the rounds: this many seconds with no requests, then RSS read again (rss_quiet_mb: what the gateway gives back once quiet)
const GW_LOG = opt('--log', null); // a file: the gateway's whole output, written as the harness ends (with --node-args '--require bench/heap-watch.cjs', its heap after each major GC)
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
    ...(FRONTEND ? { frontend: FRONTEND } : {}),
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
  if (TAIL) { nodeArgs.push('--require', join(ROOT, 'bench/tail-hooks.cjs')); env.TAIL_OUT = join(work, 'tail-events.json'); if (args.includes('--alloc')) env.TAIL_ALLOC = `${TAIL}.heapprofile`; }
  const gw = await start('gateway', GATEWAY_NODE, [...nodeArgs, ...NODE_ARGS, CLI, 'serve', '--config', cfg, '--data-dir', dir], { env, ready: /"base_url":"(http:[^"]+)"/ });
  procs.push(gw);
  const cli = (...a) => JSON.parse(execFileSync(process.execPath, [CLI, ...a, '--json', '--config', cfg, '--data-dir', dir], { env: { ...process.env, ...env } }).toString());
  const acct = cli('account', 'create', '--email', 'prof@prof.local', '--credit', '1000000');
  const key = cli('key', 'create', '--account', acct.account_id, '--rpm', '1000000000', '--concurrency', '1000000').key;
  const url = `${gw.match[1]}/v1/chat/completions`;
  const chat = ['-m', 'POST', '-H', 'content-type=application/json', '-H', `authorization=Bearer ${key}`, '-b', CHAT]; // autocannon's and paced.mjs's flags alike
  const ac = (n) => autocannon([...chat, '-c', CONNECTIONS, '-a', String(n), url]);
  if (SEQUENTIAL > 0) {
    // The load runs until the sequential rounds end, on its own connections, timed apart from them.
    const load = LOAD > 0 ? spawn(process.execPath, [join(ROOT, 'bench/paced.mjs'), ...chat, '--url', url, '--rate', String(LOAD), '--amount', String(LOAD * 3600)],
      { stdio: 'ignore' }) : null;
    if (load) await new Promise((r) => setTimeout(r, 2000)); // the load's connections open and its pace settles
    const reqs = await sequential(url, key, gw.pid);
    load?.kill();
    if (TAIL) {
      await stop(gw);
      writeFileSync(`${TAIL}.log`, gw.log()); // the gateway's output: with --node-args '--trace-gc-nvp', each GC's phases
      const events = JSON.parse(readFileSync(env.TAIL_OUT, 'utf8'));
      writeFileSync(TAIL, JSON.stringify({ requests: reqs, events }));
      console.log(JSON.stringify(tailReport(reqs, events), null, 1));
    }
    return;
  }
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
  const quiet = QUIET_S > 0 ? await new Promise((r) => setTimeout(() => r(usage(gw.pid).rss), QUIET_S * 1000)) : null;
  if (GW_LOG) writeFileSync(GW_LOG, gw.log());
  console.log(JSON.stringify({ cli: CLI, node: GATEWAY_NODE === process.execPath ? process.version : GATEWAY_NODE, frontend: FRONTEND ?? 'auto', store: STORE, requests: REQUESTS, rounds, rss_mb: Math.round(idle / 1e5) / 10,
    ...(quiet === null ? {} : { quiet_s: QUIET_S, rss_quiet_mb: Math.round(quiet / 1e5) / 10 }) }));
}

/** One request at a time over one keep-alive socket: latency percentiles and the gateway's CPU per request. */
async function sequential(url, key, pid) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const u = new URL(url);
  const post = () => new Promise((res, rej) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'content-length': Buffer.byteLength(CHAT) } }, (r) => {
      r.resume();
      r.on('end', () => (r.statusCode === 200 ? res() : rej(new Error(`status ${r.statusCode}`))));
    });
    req.on('error', rej);
    req.end(CHAT);
  });
  for (let i = 0; i < 300; i++) await post();
  const rounds = [];
  const all = []; // [wall-clock start ms, end ms, gateway main thread's ns on a CPU, ns runnable but waiting] of every measured request
  const mainSched = `/proc/${pid}/task/${pid}/schedstat`;
  const mainNs = () => { const [a, b] = readFileSync(mainSched, 'utf8').split(' '); return [Number(a), Number(b)]; };
  // /proc/<pid>/schedstat, summed over the process's threads: ns on a CPU, ns runnable but waiting for one
  const sched = () => { let run = 0, wait = 0; for (const t of readdirSync(`/proc/${pid}/task`)) { try { const [a, b] = readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' '); run += Number(a); wait += Number(b); } catch { /* thread gone */ } } return { run, wait }; };
  // CPU seconds by thread name (the main thread is "node"; V8's workers, libuv's pool, uWS's own)
  const threads = () => { const m = {}; for (const t of readdirSync(`/proc/${pid}/task`)) { try { const st = readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8'); const name = st.slice(st.indexOf('(') + 1, st.lastIndexOf(')')); const f = st.slice(st.lastIndexOf(')') + 2).split(' '); m[name] = (m[name] ?? 0) + Number(f[11]) + Number(f[12]); } catch { /* gone */ } } return m; };
  const steal = () => Number(readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/)[8]);
  for (let round = 0; round < ROUNDS; round++) {
    const before = usage(pid).cpu;
    const s0 = sched(), st0 = steal(), th0 = threads();
    const ts = [];
    for (let i = 0; i < SEQUENTIAL; i++) {
      const m0 = TAIL ? mainNs() : null;
      const w0 = performance.timeOrigin + performance.now();
      const t0 = process.hrtime.bigint();
      await post();
      ts.push(Number(process.hrtime.bigint() - t0) / 1000);
      const w1 = performance.timeOrigin + performance.now();
      const m1 = TAIL ? mainNs() : null;
      all.push(TAIL ? [w0, w1, m1[0] - m0[0], m1[1] - m0[1]] : [w0, w1]);
      if (GAP_MS > 0) await new Promise((r) => setTimeout(r, GAP_MS));
    }
    const cpu = usage(pid).cpu - before;
    ts.sort((a, b) => a - b);
    const at = (q) => Math.round(ts[Math.min(ts.length - 1, Math.floor(q * ts.length))]);
    const s1 = sched();
    rounds.push({ p50_us: at(0.5), p90_us: at(0.9), p99_us: at(0.99), gateway_cpu_us_per_req: Math.round((cpu / SEQUENTIAL) * 1e6),
      gateway_runqueue_wait_us_per_req: Math.round((s1.wait - s0.wait) / SEQUENTIAL / 1000), steal_ticks: steal() - st0,
      gateway_cpu_ticks_by_thread: Object.fromEntries(Object.entries(threads()).map(([k, v]) => [k, v - (th0[k] ?? 0)]).filter(([, v]) => v > 0)) });
  }
  agent.destroy();
  // How many of the requests a spare hold admitted (README, "Spare holds"): none back to back, where the next
  // request arrives before the spare its predecessor's end placed.
  const m = await fetch(`${url.replace(/\/v1\/.*$/, '')}/metrics`).then((r) => r.text(), () => '');
  const spares = Object.fromEntries([...m.matchAll(/^tollgate_spare_holds_total\{outcome="(\w+)"\} (\d+)/gm)].map((x) => [x[1], Number(x[2])]));
  console.log(JSON.stringify({ cli: CLI, store: STORE, sequential: SEQUENTIAL, gap_ms: GAP_MS, limits: LIMITS, spares, rounds }));
  return all;
}

/**
 * What the slowest 1% of sequential requests overlapped, against all of them: for each kind of event in the
 * gateway (a GC by kind, a PostgreSQL query by statement, a Redis command or script by its key count, an
 * upstream call), the share of requests that overlapped one, and the slow requests' upstream time against the rest.
 */
function tailReport(reqs, events) {
  const label = (e) => (e[0] === 'gc' ? `gc ${e[3]}` : e[0] === 'pg' ? `pg ${e[3].startsWith('tollgate_') ? e[3] : e[3].split(' ').slice(0, 3).join(' ')}` : e[0] === 'redis' ? `redis ${e[3]}` : e[0]);
  events.sort((a, b) => a[1] - b[1]);
  const durs = reqs.map(([s, e]) => e - s).sort((a, b) => a - b);
  const p99 = durs[Math.floor(0.99 * durs.length)];
  const p50 = durs[Math.floor(0.5 * durs.length)];
  const rows = new Map();
  const tally = (key, slow) => { const r = rows.get(key) ?? { all: 0, slow: 0 }; r.all += 1; if (slow) r.slow += 1; rows.set(key, r); };
  let slowN = 0;
  const slowDetail = [];
  const split = { slow: { upstream: 0, rest: 0, n: 0, run: 0, wait: 0 }, typical: { upstream: 0, rest: 0, n: 0, run: 0, wait: 0 } };
  let j = 0;
  for (const [s, e, reqRun, reqWait] of reqs) {
    const d = e - s;
    const slow = d >= p99;
    if (slow) slowN += 1;
    while (j < events.length && events[j][2] < s - 50) j++;
    const seen = new Set();
    let up = 0;
    const over = [];
    for (let k = j; k < events.length && events[k][1] <= e; k++) {
      const ev = events[k];
      if (ev[2] < s) continue;
      if (ev[0] === 'upstream' && ev[1] >= s) up += ev[2] - ev[1];
      const l = label(ev);
      if (!seen.has(l)) { seen.add(l); tally(l, slow); }
      if (slow) over.push(`${l} ${(ev[1] - s).toFixed(2)}→${(ev[2] - s).toFixed(2)} ms`);
    }
    const bucket = slow ? split.slow : Math.abs(d - p50) < 0.1 * p50 ? split.typical : null;
    if (bucket) { bucket.upstream += up; bucket.rest += d - up; bucket.n += 1; bucket.run += (reqRun ?? 0) / 1e6; bucket.wait += (reqWait ?? 0) / 1e6; }
    if (slow) slowDetail.push({ ms: Number(d.toFixed(2)), gateway_on_cpu_ms: Number(((reqRun ?? 0) / 1e6).toFixed(2)), gateway_waiting_ms: Number(((reqWait ?? 0) / 1e6).toFixed(2)), overlapped: over });
  }
  const share = [...rows].map(([k, r]) => ({ event: k, of_all: `${((100 * r.all) / reqs.length).toFixed(1)}%`, of_slowest_1pct: `${((100 * r.slow) / slowN).toFixed(1)}%` }))
    .sort((a, b) => parseFloat(b.of_slowest_1pct) - parseFloat(a.of_slowest_1pct));
  const mean = (b) => ({ n: b.n, upstream_ms: Number((b.upstream / Math.max(1, b.n)).toFixed(3)), rest_ms: Number((b.rest / Math.max(1, b.n)).toFixed(3)),
    gateway_on_cpu_ms: Number((b.run / Math.max(1, b.n)).toFixed(3)), gateway_runnable_waiting_ms: Number((b.wait / Math.max(1, b.n)).toFixed(3)) });
  slowDetail.sort((a, b) => b.ms - a.ms);
  return { requests: reqs.length, p50_ms: Number(p50.toFixed(3)), p99_ms: Number(p99.toFixed(3)), overlap: share,
    time_split: { slowest_1pct: mean(split.slow), near_p50: mean(split.typical) }, slowest: slowDetail.slice(0, 12) };
}

try {
  await main();
} finally {
  for (const p of procs.reverse()) await stop(p);
  // What the gateway left in Redis (a hold total, a key's rpm bucket).
  if (STORE === 'pg') await clearRedisPrefix(`tgprof${process.pid}:`, REDIS).catch(() => undefined);
  if (db) execFileSync('psql', [PG_ADMIN, '-qc', `DROP DATABASE IF EXISTS ${db}`], { stdio: 'ignore' });
  rmSync(work, { recursive: true, force: true });
}

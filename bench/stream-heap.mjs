// What one open stream keeps alive: N slow chat streams held open through one contender, its RSS and,
// from a heap snapshot taken before and one while they are open (each after a full GC), the live JS heap
// per stream and the object kinds that make it up.
//   node bench/stream-heap.mjs [--contender pg|embedded|floor] [--streams 3000] [--prompt-bytes 0] [--route chat|completions|responses] [--cli PATH] [--top 12]
// --prompt-bytes B sends a user message of about B bytes instead of a short one (what a long prompt costs
// each stream as long as it runs). Results and readings: docs/benchmarks.md, "Memory per open stream".
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, renameSync, rmSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { join, resolve } from 'node:path';
import { tmpdir } from 'node:os';
import { ROOT, start, stop } from './lib.mjs';
import { clearRedisPrefix } from '../test/helpers/gateway.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const CONTENDER = opt('--contender', 'pg');
const N = Number(opt('--streams', '3000'));
const PROMPT = Number(opt('--prompt-bytes', '0'));
const CLI = resolve(opt('--cli', join(ROOT, 'dist/cli.js')));
const TOP = Number(opt('--top', '12'));
const work = join(tmpdir(), `tollgate-stream-heap-${process.pid}`);
const PG_ADMIN = process.env.TOLLGATE_BENCH_PG ?? 'postgresql://postgres@127.0.0.1:5432/postgres';
const REDIS = process.env.TOLLGATE_BENCH_REDIS ?? 'redis://127.0.0.1:6379';
mkdirSync(work, { recursive: true });

const content = PROMPT > 0 ? 'word '.repeat(Math.ceil(PROMPT / 5)) : 'Tell me a story.';
// --route completions | responses: the same streams through another text route (chat by default).
const ROUTE = opt('--route', 'chat');
const PATH = { chat: '/v1/chat/completions', completions: '/v1/completions', responses: '/v1/responses' }[ROUTE];
const BODY = JSON.stringify(ROUTE === 'completions' ? { model: 'sim-chat', prompt: content, max_tokens: 100, stream: true }
  : ROUTE === 'responses' ? { model: 'sim-chat', input: content, max_output_tokens: 100, stream: true }
    : { model: 'sim-chat', messages: [{ role: 'user', content }], max_tokens: 100, stream: true });
const procs = [];
let db;

async function contender(simUrl) {
  const snapFlags = ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${work}`];
  if (CONTENDER === 'floor') {
    const p = await start('floor', process.execPath, [...snapFlags, join(ROOT, 'bench/floor.mjs'), simUrl], { ready: /"base_url":"(http:[^"]+)"/ });
    procs.push(p);
    return { p, url: p.match[1], key: 'none' };
  }
  const dir = join(work, 'gw');
  const config = { listen: '127.0.0.1:0', limits: { default_rpm: 1e9, default_concurrency: 1e6 }, payments: { provider: 'sandbox', allow_sandbox: true },
    upstreams: { sim: { base_url: simUrl } },
    models: [{ id: 'sim-chat', upstream: 'sim', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }] };
  const env = { TOLLGATE_LOG_REQUESTS: '0' };
  if (CONTENDER === 'pg') {
    db = `tg_stream_heap_${process.pid}`;
    execFileSync('psql', [PG_ADMIN, '-qc', `CREATE DATABASE ${db}`], { stdio: 'ignore' });
    env.TG_BENCH_DB = PG_ADMIN.replace(/\/[^/]*$/, `/${db}`);
    env.TG_BENCH_REDIS = REDIS;
    config.database = { url_env: 'TG_BENCH_DB' };
    config.redis = { url_env: 'TG_BENCH_REDIS', key_prefix: `tgheap${process.pid}:` };
  }
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  const p = await start('gateway', process.execPath, [...snapFlags, CLI, 'serve', '--config', join(dir, 'config.json'), '--data-dir', dir], { env, ready: /"base_url":"(http:[^"]+)"/ });
  procs.push(p);
  const cli = (...a) => JSON.parse(execFileSync(process.execPath, [CLI, ...a, '--json', '--config', join(dir, 'config.json'), '--data-dir', dir], { env: { ...process.env, ...env } }).toString());
  const acct = cli('account', 'create', '--email', 'heap@bench.local', '--credit', '100000');
  return { p, url: p.match[1], key: cli('key', 'create', '--account', acct.account_id, '--rpm', '1000000000', '--concurrency', '1000000').key };
}

const rssMb = (pid) => Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) / 1024;

/** SIGUSR2 makes the process write a heap snapshot (after a full GC); returns its node kinds' sizes and counts. */
async function snapshot(pid, label) {
  const seen = new Set(readdirSync(work));
  process.kill(pid, 'SIGUSR2');
  let f;
  for (let size = -1; ; await new Promise((r) => setTimeout(r, 500))) {
    f ??= readdirSync(work).find((x) => x.endsWith('.heapsnapshot') && !seen.has(x));
    if (!f) continue;
    const s = statSync(join(work, f)).size;
    if (s > 0 && s === size) break;
    size = s;
  }
  const path = join(work, `${label}.heapsnapshot`);
  renameSync(join(work, f), path);
  const snap = JSON.parse(readFileSync(path, 'utf8'));
  rmSync(path);
  const fields = snap.snapshot.meta.node_fields; const types = snap.snapshot.meta.node_types[0]; const W = fields.length;
  const iT = fields.indexOf('type'), iN = fields.indexOf('name'), iS = fields.indexOf('self_size');
  const kinds = new Map(); let total = 0;
  for (let i = 0; i < snap.nodes.length; i += W) {
    const t = types[snap.nodes[i + iT]];
    const name = t.includes('string') ? '' : t === 'code' ? '' : snap.strings[snap.nodes[i + iN]].slice(0, 40);
    const k = `${t} ${name}`.trim(); const v = kinds.get(k) ?? [0, 0];
    v[0] += snap.nodes[i + iS]; v[1]++; kinds.set(k, v); total += snap.nodes[i + iS];
  }
  return { total, kinds };
}

async function main() {
  const sim = await start('sim', process.execPath, [CLI, 'sim', '--listen', '127.0.0.1:0', '--token-delay-ms', '300'], { ready: /"url":"(http:[^"]+)"/ });
  procs.push(sim);
  const c = await contender(sim.match[1]);
  const u = new URL(c.url);
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const open = (delay) => new Promise((res) => {
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${c.key}`, ...(delay === undefined ? {} : { 'x-sim-token-delay-ms': String(delay) }) };
    const r = http.request({ host: u.hostname, port: u.port, path: PATH, method: 'POST', agent, headers }, (s) => {
      s.once('data', () => res(r));
      s.resume();
    });
    r.on('error', () => res(r));
    r.end(BODY);
  });
  for (let i = 0; i < 20; i++) (await open(0)).destroy(); // warm up (fast streams)
  await new Promise((r) => setTimeout(r, 1500));
  const idleRss = rssMb(c.p.pid);
  const before = await snapshot(c.p.pid, 'before');
  const reqs = await Promise.all(Array.from({ length: N }, () => open()));
  await new Promise((r) => setTimeout(r, 1000));
  const openRss = rssMb(c.p.pid);
  const during = await snapshot(c.p.pid, 'during');
  for (const r of reqs) r.destroy();
  const per = (a, b) => Math.round((b - a) / N);
  const rows = [...during.kinds].map(([k, [s, n]]) => { const [s0, n0] = before.kinds.get(k) ?? [0, 0]; return { kind: k, bytes_per_stream: per(s0, s), count_per_stream: +((n - n0) / N).toFixed(2) }; })
    .sort((a, b) => b.bytes_per_stream - a.bytes_per_stream).slice(0, TOP);
  console.log(JSON.stringify({ contender: CONTENDER, route: ROUTE, cli: CONTENDER === 'floor' ? undefined : CLI, streams: N, prompt_bytes: BODY.length,
    rss_mb: { idle: +idleRss.toFixed(1), open: +openRss.toFixed(1) }, rss_kb_per_stream: +(((openRss - idleRss) * 1024) / N).toFixed(1),
    live_heap_mb: { idle: +(before.total / 1e6).toFixed(1), open: +(during.total / 1e6).toFixed(1) }, live_heap_bytes_per_stream: per(before.total, during.total), top: rows }, null, 1));
}

try {
  await main();
} finally {
  for (const p of procs.reverse()) await stop(p);
  // What the gateway left in Redis (a hold total, a key's rpm bucket).
  if (db) await clearRedisPrefix(`tgheap${process.pid}:`, REDIS).catch(() => undefined);
  if (db) { try { execFileSync('psql', [PG_ADMIN, '-qc', `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`], { stdio: 'ignore' }); } catch { /* left for the next run */ } }
  rmSync(work, { recursive: true, force: true });
}

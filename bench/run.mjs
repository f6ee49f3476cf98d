// The benchmark: direct-to-sim, Tollgate (embedded; PostgreSQL + Redis), LiteLLM and Portkey side by side, alternating.
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir, cpus, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:net';
import { ROOT, start, stop, usage, cpuByName, cpuDelta, reapedChildrenCpu, rssSampler, autocannon, paced, probe, streamProbe, json } from './lib.mjs';
import { clearRedisPrefix } from '../test/helpers/gateway.mjs';

const args = process.argv.slice(2);
const QUICK = args.includes('--quick');
const only = args.includes('--only') ? args[args.indexOf('--only') + 1].split(',') : null;
const wantLitellm = !args.includes('--no-litellm') && !QUICK;
const wantPortkey = !args.includes('--no-portkey') && (!QUICK || Boolean(only?.includes('portkey')));
/** Portkey's gateway as published on npm, installed by bench/run into bench/.portkey (pinned there). */
const PORTKEY = join(ROOT, 'bench/.portkey/node_modules/@portkey-ai/gateway/build/start-server.js');
const CLI = join(ROOT, 'dist/cli.js');
/** `--cli PATH`: the Tollgate contenders run another build's `dist/cli.js` (an A/B against main's build); `sim` and the floors stay on this one. */
const GATEWAY_CLI = args.includes('--cli') ? resolve(args[args.indexOf('--cli') + 1]) : CLI;
/** Preloaded into the gateway and the floor: a line after each major GC with the live heap, V8's heap and the RSS (bench/heap-watch.cjs). */
const HEAP_WATCH = join(ROOT, 'bench/heap-watch.cjs');
/** `--gateway-node PATH`: the Node binary the Tollgate contenders run on (`test/node-versions 24` prints one; `auto` then picks node:http where uWS has no build); `sim`, the floors and the load stay on this one. */
const GATEWAY_NODE = args.includes('--gateway-node') ? resolve(args[args.indexOf('--gateway-node') + 1]) : process.execPath;
/** `--node-args "FLAGS"`: Node/V8 flags for the Tollgate contenders only (measuring a flag's effect). */
const NODE_ARGS = args.includes('--node-args') ? args[args.indexOf('--node-args') + 1].split(/\s+/).filter(Boolean) : [];
/** `--scenarios a,b`: run only these of seq, rates, max, streams, key (after the warm-up); all by default. */
const SCENARIOS = args.includes('--scenarios') ? args[args.indexOf('--scenarios') + 1].split(',') : ['seq', 'rates', 'max', 'streams', 'key'];
/** `--stream-loops N`: how many of the streams scenario's streams bench/stream-probe.mjs opens and times read by read. */
const STREAM_LOOPS = args.includes('--stream-loops') ? Number(args[args.indexOf('--stream-loops') + 1]) : null;
const PG_ADMIN = process.env.TOLLGATE_BENCH_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS = process.env.TOLLGATE_BENCH_REDIS ?? 'redis://127.0.0.1:6379';
const PLAN = QUICK
  ? { seqSecs: 2, rates: [1000], rateSecs: 2, sizingSecs: 1, maxSecs: 2, streams: 500, streamLoops: STREAM_LOOPS ?? 20, streamRounds: 1, oneStreamRound: 1, keySecs: 2 }
  : { seqSecs: 5, rates: [1000, 2000, 5000], rateSecs: 10, sizingSecs: 2, maxSecs: 10, streams: 9900, streamLoops: STREAM_LOOPS ?? 50, streamRounds: 3, oneStreamRound: 1, keySecs: 8 };
const IN_PER_M = 300_000_000n; // $0.30 per 1M input tokens, in nanodollars
const OUT_PER_M = 2_500_000_000n;
const CHAT = JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'Hello, how are you today?' }], max_tokens: 16 });
const STREAM = JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 100, stream: true });
const work = mkdtempSync(join(tmpdir(), 'tollgate-bench-'));
const procs = [];
const databases = []; // created per PostgreSQL contender, dropped at the end
const log = (...a) => console.error(new Date().toISOString().slice(11, 19), ...a);

function price(u) {
  const n = BigInt(u.prompt_tokens) * IN_PER_M + BigInt(u.completion_tokens) * OUT_PER_M;
  return (n + 999_999n) / 1_000_000n;
}

async function sim(delay) {
  const p = await start(`sim(${delay}ms)`, process.execPath, [CLI, 'sim', '--listen', '127.0.0.1:0', '--token-delay-ms', String(delay)], { ready: /"url":"(http:[^"]+)"/ });
  procs.push(p);
  return { ...p, url: p.match[1] };
}

/** The variables `npm start` gives the gateway by default (`NAME=${NAME:-value}` in package.json's start script). */
const START_SCRIPT = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start;
/** …and the options it puts before an operator's own NODE_OPTIONS (`NODE_OPTIONS="FLAGS ${NODE_OPTIONS:-}"`). */
const START_ENV = Object.fromEntries([
  ...[...START_SCRIPT.matchAll(/(\w+)=\$\{\1:-([^}]*)\}/g)].map((m) => [m[1], m[2]]),
  ...[...START_SCRIPT.matchAll(/NODE_OPTIONS="([^"$]*?)\s*\$\{NODE_OPTIONS:-\}"/g)].map((m) => ['NODE_OPTIONS', m[1]]),
]);

async function tollgate(name, simUrl, streamSimUrl, pg, workers = 1, frontend = 'auto') {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  // The embedded contenders run as `npm start` runs the embedded default: with its environment (glibc's malloc
  // thresholds, read from package.json's start script). PostgreSQL + Redis runs as an operator's `serve` would.
  const env = { TOLLGATE_LOG_REQUESTS: '0', ...(pg ? {} : START_ENV) };
  const config = {
    listen: '127.0.0.1:0',
    workers,
    frontend,
    limits: { default_rpm: 1_000_000_000, default_concurrency: 1_000_000 },
    payments: { provider: 'sandbox', allow_sandbox: true },
    upstreams: { sim: { base_url: simUrl }, simstream: { base_url: streamSimUrl } },
    models: [
      { id: 'sim-chat', upstream: 'sim', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 },
      { id: 'sim-chat-stream', upstream: 'simstream', upstream_model: 'sim-chat', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 },
    ],
  };
  if (pg) {
    const db = `tg_bench_${process.pid}_${name.replace(/\W/g, '_')}`;
    execFileSync('psql', [PG_ADMIN, '-qc', `DROP DATABASE IF EXISTS ${db}`, '-c', `CREATE DATABASE ${db}`], { stdio: 'ignore' });
    databases.push(db);
    env.TG_BENCH_DB = PG_ADMIN.replace(/\/[^/]*$/, `/${db}`);
    env.TG_BENCH_REDIS = REDIS;
    config.database = { url_env: 'TG_BENCH_DB', pool_size: 8 };
    config.redis = { url_env: 'TG_BENCH_REDIS', key_prefix: `tgbench${process.pid}${name}:` };
  }
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify(config));
  const p = await start(name, GATEWAY_NODE, [...NODE_ARGS, '--require', HEAP_WATCH, GATEWAY_CLI, 'serve', '--config', cfg, '--data-dir', dir], { env, ready: /"base_url":"(http:[^"]+)"/ });
  procs.push(p);
  const cli = (...a) => JSON.parse(execFileSync(process.execPath, [GATEWAY_CLI, ...a, '--json', '--config', cfg, '--data-dir', dir], { env: { ...process.env, ...env } }).toString());
  const acct = cli('account', 'create', '--email', `bench@${name}.local`, '--credit', '1000000');
  const key = cli('key', 'create', '--account', acct.account_id, '--rpm', '1000000000', '--concurrency', '1000000').key;
  return { name, kind: 'tollgate', workers, url: p.match[1], pid: p.pid, log: p.log, auth: { authorization: `Bearer ${key}` }, streamModel: 'sim-chat-stream' };
}

/** A port nothing listens on now (a fixed guess can land on an ephemeral port in use: LiteLLM then exits with 3). */
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => { const { port } = srv.address(); srv.close(() => resolve(port)); });
  });
}

async function litellm(simUrl, streamSimUrl) {
  const dir = join(work, 'litellm');
  mkdirSync(dir, { recursive: true });
  const cfg = join(dir, 'config.yaml');
  writeFileSync(cfg, [
    'model_list:',
    '  - model_name: sim-chat', `    litellm_params: { model: openai/sim-chat, api_base: "${simUrl}/v1", api_key: "unused" }`,
    '  - model_name: sim-chat-stream', `    litellm_params: { model: openai/sim-chat, api_base: "${streamSimUrl}/v1", api_key: "unused" }`,
    'general_settings:', '  master_key: sk-bench-master',
    'litellm_settings:', '  telemetry: false', '  drop_params: false',
  ].join('\n'));
  const bin = join(ROOT, 'bench/.venv-litellm/bin/litellm');
  const url = `http://127.0.0.1:${await freePort()}`;
  // LITELLM_LOCAL_MODEL_COST_MAP: use the cost map shipped in the package instead of fetching it.
  const p = await start('litellm', bin, ['--config', cfg, '--host', '127.0.0.1', '--port', url.split(':')[2], '--num_workers', '1'],
    { env: { LITELLM_LOG: 'ERROR', LITELLM_TELEMETRY: 'False', DISABLE_SCHEMA_UPDATE: 'true', LITELLM_LOCAL_MODEL_COST_MAP: 'True' },
      readyUrl: `${url}/health/liveliness`, timeoutMs: 120_000 });
  procs.push(p);
  return { name: 'litellm', kind: 'litellm', url, pid: p.pid, auth: { authorization: 'Bearer sk-bench-master' }, streamModel: 'sim-chat-stream' };
}

/**
 * Portkey's AI gateway (Node, Hono): forwards to the sim as an OpenAI-compatible custom host. It does no
 * auth, limits or billing here; the request headers name the provider and the host. `--port=N` (with
 * `=`) is the form it reads; `--headless` drops its console spinner.
 */
async function portkey(simUrl, streamSimUrl) {
  const url = `http://127.0.0.1:${await freePort()}`;
  const p = await start('portkey', process.execPath, [PORTKEY, `--port=${url.split(':')[2]}`, '--headless'],
    { env: { NODE_ENV: 'production' }, readyUrl: `${url}/`, timeoutMs: 60_000 });
  procs.push(p);
  const via = (host) => ({ authorization: 'Bearer unused', 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${host}/v1` });
  return { name: 'portkey', kind: 'portkey', url, pid: p.pid, log: p.log, auth: via(simUrl), streamAuth: via(streamSimUrl), streamModel: 'sim-chat' };
}

/** The design's floor (bench/floor.mjs): the gateway's uWS front end and proxy adapter with nothing else on the path. */
async function floor(name, simUrl, streamSimUrl, client) {
  const p = await start(name, process.execPath, ['--require', HEAP_WATCH, join(ROOT, 'bench/floor.mjs'), simUrl, streamSimUrl],
    { env: { FLOOR_CLIENT: client }, ready: /"base_url":"(http:[^"]+)"/ });
  procs.push(p);
  return { name, kind: 'floor', url: p.match[1], pid: p.pid, log: p.log, auth: {}, streamModel: 'sim-chat-stream' };
}

function direct(simUrl, streamSimUrl, pid, streamPid) {
  return { name: 'direct', kind: 'direct', url: simUrl, streamUrl: streamSimUrl, pid, streamPid, auth: {}, streamModel: 'sim-chat' };
}

async function balance(c) {
  return BigInt(Math.round((await json(`${c.url}/svc/v1/key`, { headers: c.auth })).balance * 1e9));
}

/**
 * How much load autocannon sends (the warm-up, max rate, the key route): Tollgate and direct get a fixed number
 * of requests, so none is cut off at the end and the ledger check stays exact; LiteLLM and Portkey, slower and
 * with no ledger to check, get the same time instead, so a run cannot take hours. (The fixed rates, sent by
 * bench/paced.mjs, are a duration for everyone: it cuts nothing off.)
 */
const byDuration = (c) => c.kind === 'litellm' || c.kind === 'portkey';
const amount = (c, requests, secs) => (byDuration(c) ? ['-d', String(secs)] : ['-a', String(requests)]);

/**
 * Achieved requests per second: completed requests over the run's wall time. (autocannon's
 * `requests.average` is the mean of whole one-second buckets, so a run of a fixed amount that ends
 * in, say, 1.3 s reads as amount / 2.)
 */
const achievedQps = (ac) => (ac.duration ? Math.round(ac.requests.total / ac.duration) : 0);

const NO_LOAD = { '2xx': 0, non2xx: 0, errors: 0, timeouts: 0, requests: { total: 0, average: 0 }, latency: { p50: null, p90: null, p99: null, max: null } };

const headers = (c) => ({ ...c.auth, 'content-type': 'application/json' });
/** Headers as the load tools take them: `-H name=value` each. */
const hArgs = (h) => Object.entries(h).flatMap(([k, v]) => ['-H', `${k}=${v}`]);
const acArgs = (c, body) => ['-m', 'POST', ...hArgs(headers(c)), '-b', body];

/** The warnings and errors in a contender's log (the last 100 KB the harness keeps), counted by message and cause. */
function warnings(c) {
  const counts = {};
  for (const line of (c.log?.() ?? '').split('\n')) {
    const m = /"level":"(?:warn|error)","msg":"([^"]+)"(?:.*?"error":"([^"]*)")?/.exec(line);
    if (m) { const k = m[2] ? `${m[1]}: ${m[2]}` : m[1]; counts[k] = (counts[k] ?? 0) + 1; }
  }
  return counts;
}

/** `name:size:used,...` (bench/heap-watch.cjs) as { name: [size MB, used MB] }. */
function spacesMb(text, mb) {
  return Object.fromEntries(text.split(',').map((x) => { const [n, size, used] = x.split(':'); return [n, [mb(Number(size)), mb(Number(used))]]; }));
}

/**
 * What bench/heap-watch.cjs reported between `from` and `to` (ms): the major GCs, the most each left live and
 * V8's whole heap at most (of any one process: two workers are not summed), and the split of the RSS at the
 * major GC that found it highest: V8's heap (and its spaces, each held and in use), its external memory
 * (Buffers, native reports) and the file-backed pages. Nothing for a contender without it.
 */
function heapWatched(c, from, to) {
  if (!c.log) return {};
  let gcs = 0; let live = 0; let heap = 0; let top = null;
  for (const m of c.log().matchAll(/^HEAPWATCH t=(\d+) live=(\d+) heap=(\d+) rss=(\d+)(?: ext=(\d+) file=(\d+))?(?: spaces=(\S+))?/gm)) {
    const t = Number(m[1]);
    if (t < from || t > to) continue;
    gcs++; live = Math.max(live, Number(m[2])); heap = Math.max(heap, Number(m[3]));
    if (m[5] !== undefined && (!top || Number(m[4]) > top.rss)) top = { rss: Number(m[4]), heap: Number(m[3]), ext: Number(m[5]), file: Number(m[6]), spaces: m[7] };
  }
  const mb = (b) => +(b / 2 ** 20).toFixed(1);
  const split = top ? { at_top_rss: { rss_mb: mb(top.rss), heap_mb: mb(top.heap), external_mb: mb(top.ext), file_mb: mb(top.file),
    other_mb: mb(top.rss - top.heap - top.ext - top.file), ...(top.spaces ? { spaces_mb: spacesMb(top.spaces, mb) } : {}) } } : {};
  return gcs ? { heap_watch: { major_gcs: gcs, live_max_mb: mb(live), heap_max_mb: mb(heap), ...split } } : {};
}

/** Runs one load against a contender, with CPU, RSS, the latency probe and (Tollgate) the ledger check. */
async function measure(c, label, { url, body, unitCost, extra, paced: pacedArgs, probeBody, streamLoops = 0, pid = c.pid, simPid, probeOnlySecs = 0 }) {
  const warned = warnings(c);
  const t0 = Date.now();
  const before = usage(pid);
  const simBefore = simPid && simPid !== pid ? usage(simPid).cpu : null;
  const shared0 = cpuByName(['redis-server', 'postgres']);
  const load0 = reapedChildrenCpu();
  const stopRss = rssSampler(pid);
  const bal0 = c.kind === 'tollgate' ? await balance(c) : 0n;
  const stopProbe = probeBody ? probe(url, { headers: headers(c), body: probeBody, everyMs: probeOnlySecs ? 1 : 5 }) : null;
  // Streams timed read by read beside the load (the streams scenario): gaps inside a stream, stalls.
  // Each of the probe's streams on a new connection: on one kept alive, they were served while the load's
  // connections waited to be accepted (node:http: 23,000-35,000 probe streams in a round, and autocannon's timing out).
  const stopStreams = streamLoops ? streamProbe(['--url', url, '--loops', String(streamLoops), '--fresh', ...hArgs(c.auth), '-b', body]) : null;
  // With probeOnlySecs there is no load: the probe's sequential requests alone, the latency floor.
  const ac = probeOnlySecs
    ? await new Promise((r) => setTimeout(() => r(NO_LOAD), probeOnlySecs * 1000))
    : pacedArgs ? await paced([...acArgs(c, body), ...pacedArgs, '--url', url])
      : await autocannon([...acArgs(c, body), ...extra, url]);
  const pr = stopProbe ? await stopProbe() : null;
  const sp = stopStreams ? await stopStreams() : null;
  const peak = stopRss();
  const after = usage(pid);
  const shared1 = cpuByName(['redis-server', 'postgres']);
  const load1 = reapedChildrenCpu();
  const simAfter = simBefore === null ? null : usage(simPid).cpu;
  const n = ac['2xx'] + (pr?.ok ?? 0) + (sp?.ok ?? 0);
  const out = {
    contender: c.name, scenario: label, requests: ac.requests.total, ok2xx: ac['2xx'], non2xx: ac.non2xx, errors: ac.errors, timeouts: ac.timeouts,
    qps: achievedQps(ac), duration_s: ac.duration ?? null, latency_ms: { p50: ac.latency.p50, p90: ac.latency.p90, p99: ac.latency.p99, max: ac.latency.max },
    ...(ac.late !== undefined ? { load_late: ac.late, load_dropped: ac.dropped } : {}), probe_us: pr, ...(sp ? { stream_probe: sp } : {}), ...heapWatched(c, t0, Date.now()), cpu_s_per_1k: n ? +(((after.cpu - before.cpu) / n) * 1000).toFixed(3) : null, peak_rss_mb: +(peak / 2 ** 20).toFixed(1),
  };
  // Where the machine's CPU went, per request: the contender, the sim serving it, every Redis and
  // PostgreSQL process (only one contender runs load at a time; the idle ones' 400 ms change-feed polls
  // are in it too), and autocannon itself.
  const per = (s) => (n ? Math.round((s / n) * 1e6) : null);
  out.cpu_us_per_req = { contender: per(after.cpu - before.cpu), sim: simBefore === null ? null : per(simAfter - simBefore),
    redis: per(cpuDelta(shared0, shared1, 'redis-server')), postgres: per(cpuDelta(shared0, shared1, 'postgres')),
    autocannon: probeOnlySecs ? null : per(load1 - load0) };
  out.error_rate = probeOnlySecs
    ? (pr.failed / Math.max(1, pr.ok + pr.failed))
    : out.requests ? (out.non2xx + out.errors + out.timeouts + (sp?.failed ?? 0)) / (out.requests + out.errors + (sp ? sp.ok + sp.failed : 0)) : 1;
  if (out.error_rate > 0 && c.log) {
    // Failed requests: say why, as far as the gateway logged it.
    out.gateway_warnings = Object.fromEntries(Object.entries(warnings(c)).map(([k, n]) => [k, n - (warned[k] ?? 0)]).filter(([, n]) => n > 0));
    log(`${c.name} ${label}: gateway warnings ${JSON.stringify(out.gateway_warnings)}`);
  }
  if (c.kind === 'tollgate' && unitCost !== undefined) {
    // Each instance mirrors the balance; another worker's debits reach it through the 400 ms change feed.
    await new Promise((r) => setTimeout(r, c.workers > 1 ? 1000 : 300));
    const delta = bal0 - (await balance(c));
    const expected = unitCost * BigInt(n);
    out.ledger = { debited: delta.toString(), expected: expected.toString(), exact: delta === expected };
    // A request the load gave up on (autocannon's errors count its timeouts) may have been answered in part or in
    // whole: a dropped stream is billed for its prompt and what it produced. Such a round is checked against that
    // bound, each dropped request between nothing and a whole one, and said to be so; outside it, it fails.
    const dropped = (ac.errors ?? 0) + (sp?.failed ?? 0) + (pr?.failed ?? 0);
    if (!out.ledger.exact) {
      if (dropped > 0 && delta > expected && delta <= expected + unitCost * BigInt(dropped)) {
        out.ledger.within_dropped = dropped;
        log(`ledger on ${c.name} ${label}: debited ${delta}, ${delta - expected} over the ${n} answered; within what the ${dropped} requests the load dropped could have produced`);
      } else { out.ledger_failure = true; log(`LEDGER MISMATCH on ${c.name} ${label}: debited ${delta}, expected ${expected}`); }
    }
  }
  log(`${c.name.padEnd(18)} ${label.padEnd(22)} ${String(out.qps).padStart(6)} req/s  p50 ${out.latency_ms.p50}ms p99 ${out.latency_ms.p99}ms`
    + `${pr ? `  probe p50 ${pr.p50?.toFixed(0)}µs p99 ${pr.p99?.toFixed(0)}µs` : ''}`
    + `${sp ? `  probe streams ${sp.ok} (${sp.failed} failed), gap p99 ${sp.gap_ms.p99}ms max ${sp.gap_ms.max}ms, stalls ${sp.stalls}` : ''}  cpu ${out.cpu_s_per_1k}s/1k  rss ${out.peak_rss_mb}MB${out.heap_watch ? ` (heap ${out.heap_watch.heap_max_mb}, live ${out.heap_watch.live_max_mb}${out.heap_watch.at_top_rss ? `; at the top RSS: heap ${out.heap_watch.at_top_rss.heap_mb}, external ${out.heap_watch.at_top_rss.external_mb}, files ${out.heap_watch.at_top_rss.file_mb}, other ${out.heap_watch.at_top_rss.other_mb}` : ''})` : ''}  err ${(out.error_rate * 100).toFixed(2)}%`);
  return out;
}

async function unitCosts(c) {
  if (c.kind !== 'tollgate') return {};
  const chat = await json(`${c.url}/v1/chat/completions`, { method: 'POST', headers: headers(c), body: CHAT });
  const s = await (await fetch(`${c.url}/v1/chat/completions`, { method: 'POST', headers: headers(c),
    body: JSON.stringify({ ...JSON.parse(STREAM), model: c.streamModel, stream_options: { include_usage: true } }) })).text();
  const u = JSON.parse(s.split('\n\n').filter((e) => e.includes('"usage":{')).at(-1).slice(6)).usage;
  return { chat: price(chat.usage), stream: price(u) };
}

async function main() {
  const machine = { cores: cpus().length, cpu: cpus()[0]?.model, memory_gib: +(totalmem() / 2 ** 30).toFixed(1), node: process.version,
    ...(GATEWAY_NODE !== process.execPath ? { gateway_node: execFileSync(GATEWAY_NODE, ['--version'], { encoding: 'utf8' }).trim() } : {}) };
  log('machine', JSON.stringify(machine), QUICK ? '(quick)' : '(full)');
  const simA = await sim(0);
  const simB = await sim(1);
  const contenders = [direct(simA.url, simB.url, simA.pid, simB.pid)];
  // The quick smoke check runs direct and the two Tollgate modes only, unless --only names others.
  const want = (name, inQuick = false) => (only ? only.includes(name) : inQuick || !QUICK);
  if (want('floor')) contenders.push(await floor('floor', simA.url, simB.url, 'http-proxy-3'));
  // The floor with Node's http.request in place of http-proxy-3: the non-streaming chat scenarios only.
  if (want('floor-http')) contenders.push(await floor('floor-http', simA.url, simB.url, 'http'));
  if (want('tollgate-embedded', true)) contenders.push(await tollgate('tollgate-embedded', simA.url, simB.url, false));
  if (want('tollgate-pg-redis', true)) contenders.push(await tollgate('tollgate-pg-redis', simA.url, simB.url, true));
  // The embedded mode on the node:http front end (`frontend: node`): what it costs beside uWS (auto) on the same Node.
  if (want('tollgate-node-http')) contenders.push(await tollgate('tollgate-node-http', simA.url, simB.url, false, 1, 'node'));
  // The same, as two worker processes on one port (`workers: 2`): the non-streaming chat scenarios only.
  if (want('tollgate-pg-redis-2w')) contenders.push(await tollgate('tollgate-pg-redis-2w', simA.url, simB.url, true, 2));
  if (wantLitellm && want('litellm')) contenders.push(await litellm(simA.url, simB.url));
  if (wantPortkey && want('portkey')) contenders.push(await portkey(simA.url, simB.url));
  const active = contenders.filter((c) => !only || only.includes(c.name));
  const costs = new Map();
  for (const c of active) costs.set(c.name, await unitCosts(c));
  const rss = () => Object.fromEntries(active.map((c) => [c.name, +(usage(c.pid).rss / 2 ** 20).toFixed(1)]));
  const idleAtStart = rss();
  log('idle RSS MB, at start', JSON.stringify(idleAtStart));
  // Idle, settled: V8's memory reducer makes its first memory-reducing GC about 8 s after a process goes quiet,
  // and until then a process holds its start-up's garbage (the embedded gateway 164-167 MB, then 141-149).
  await new Promise((r) => setTimeout(r, 12_000));
  const idle = rss();
  log('idle RSS MB, settled (12 s quiet)', JSON.stringify(idle));
  const results = [];
  let flip = false;
  const each = async (fn) => { const order = flip ? [...active].reverse() : active; flip = !flip; for (const c of order) { const r = await fn(c); if (r) results.push(r); } };
  // warm-up so JIT and pools are in their steady state
  await each((c) => measure(c, 'warmup', { simPid: simA.pid, url: `${c.url}/v1/chat/completions`, body: CHAT, unitCost: costs.get(c.name).chat, extra: ['-c', '50', ...amount(c, 3000, 5)] }));
  // One request at a time, no other load: what the gateway adds when the machine is not busy.
  if (SCENARIOS.includes('seq')) await each((c) => measure(c, 'sequential, no load', { simPid: simA.pid, url: `${c.url}/v1/chat/completions`, body: CHAT, unitCost: costs.get(c.name).chat,
    probeBody: CHAT, probeOnlySecs: PLAN.seqSecs }));
  for (const rate of SCENARIOS.includes('rates') ? PLAN.rates : []) {
    await each((c) => measure(c, `chat @${rate} qps`, { simPid: simA.pid, url: `${c.url}/v1/chat/completions`, body: CHAT, unitCost: costs.get(c.name).chat, probeBody: CHAT,
      // Every contender a duration (bench/paced.mjs cuts nothing off: what is due and still waiting for a connection at
      // the end is dropped unsent and counted, and those in flight are answered), so a rate above a contender's max
      // rate ends on time instead of sending its whole backlog; the ledger check counts the answered ones only.
      paced: ['--connections', '100', '--rate', String(rate), '--duration', String(PLAN.rateSecs)] }));
  }
  // A fixed amount rather than a duration, so no request is cut off at the end and every one billed is
  // counted: the ledger check stays exact. An unmeasured run at full speed (PLAN.sizingSecs) sizes it to last about
  // PLAN.maxSecs (and warm the contender up at this concurrency).
  if (SCENARIOS.includes('max')) await each(async (c) => {
    const url = `${c.url}/v1/chat/completions`;
    const sizing = byDuration(c) ? null : await autocannon([...acArgs(c, CHAT), '-c', '128', '-d', String(PLAN.sizingSecs), url]);
    await new Promise((r) => setTimeout(r, 500)); // the sizing run's last requests settle before the ledger is read
    return measure(c, 'chat max qps', { simPid: simA.pid, url, body: CHAT, unitCost: costs.get(c.name).chat,
      extra: ['-c', '128', ...amount(c, Math.max(2000, Math.round((sizing ? achievedQps(sizing) : 0) * PLAN.maxSecs)), PLAN.maxSecs)] });
  });
  const chatOnly = (c) => c.name === 'tollgate-pg-redis-2w' || c.name === 'floor-http';
  for (let round = 0; round < (SCENARIOS.includes('streams') ? PLAN.streamRounds : 0); round++) {
    await each((c) => {
      if (chatOnly(c)) return null;
      // LiteLLM held none of the streams in any round of earlier runs (bench/results): one round says so.
      if (c.kind === 'litellm' && round > 0) return null;
      // `direct` is the limit, and the node:http front end (Node 22/24's fallback) is shown holding the streams:
      // no target compares with either's streams, so one round gives each its row. Their other rounds were
      // 31-36 s (`direct`) and 90-110 s (node:http) of load in a full run that must stay under 15 minutes on the
      // slower machines (16.6 min with them on 2026-11-29).
      if ((c.kind === 'direct' || c.name === 'tollgate-node-http') && round >= PLAN.oneStreamRound) return null;
      const body = JSON.stringify({ ...JSON.parse(STREAM), model: c.streamModel });
      // Portkey names the stream sim in its headers, not in a model id.
      if (c.streamAuth) c = { ...c, auth: c.streamAuth };
      // PLAN.streamLoops of the streams are bench/stream-probe.mjs's, timed read by read; autocannon opens the rest.
      const load = PLAN.streams - PLAN.streamLoops;
      return measure(c, `${PLAN.streams} streams`, { simPid: simB.pid, url: `${c.kind === 'direct' ? c.streamUrl : c.url}/v1/chat/completions`, body, unitCost: costs.get(c.name).stream,
        pid: c.kind === 'direct' ? c.streamPid : c.pid, streamLoops: PLAN.streamLoops, extra: ['-c', String(load), ...amount(c, load * 2, 30), '-t', '60'] });
    });
  }
  const keyContenders = active.filter((c) => c.kind === 'tollgate' && !chatOnly(c) && SCENARIOS.includes('key'));
  for (const c of keyContenders) {
    const ac = await autocannon([...hArgs(c.auth), '-c', '64', '-d', String(PLAN.keySecs), `${c.url}/svc/v1/key`]);
    results.push({ contender: c.name, scenario: 'GET /svc/v1/key max qps', qps: achievedQps(ac), latency_ms: { p50: ac.latency.p50, p99: ac.latency.p99 }, non2xx: ac.non2xx });
    log(`${c.name.padEnd(18)} GET /svc/v1/key          ${achievedQps(ac)} req/s`);
  }
  const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
  const versions = { tollgate: JSON.parse(execFileSync('node', ['-p', 'JSON.stringify(require("./package.json").version)'], { cwd: ROOT }).toString()),
    portkey: active.some((c) => c.kind === 'portkey') ? JSON.parse(execFileSync('node', ['-p', 'JSON.stringify(require("./bench/.portkey/node_modules/@portkey-ai/gateway/package.json").version)'], { cwd: ROOT }).toString()) : null,
    litellm: active.some((c) => c.kind === 'litellm') ? execFileSync(join(ROOT, 'bench/.venv-litellm/bin/python'), ['-c', 'import importlib.metadata as m; print(m.version("litellm"))']).toString().trim() : null,
    postgres: execFileSync('psql', [PG_ADMIN, '-Atc', 'SHOW server_version']).toString().trim(), redis: execFileSync('redis-server', ['--version']).toString().split(' ')[2] };
  const report = { date: new Date().toISOString(), mode: QUICK ? 'quick' : 'full', command: `bench/run ${args.join(' ')}`.trim(), machine, versions, plan: PLAN, idle_rss_mb: idle, idle_rss_at_start_mb: idleAtStart, results };
  mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
  const file = join(ROOT, `bench/results/${stamp}-${report.mode}.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  log('wrote', file);
  const failed = results.some((r) => r.ledger_failure);
  if (failed) { log('FAILED: a Tollgate run billed something other than Σ priced usage'); process.exitCode = 1; }
}

const cleanup = async () => {
  for (const p of procs.reverse()) await stop(p);
  rmSync(work, { recursive: true, force: true });
  for (const db of databases) {
    try { execFileSync('psql', [PG_ADMIN, '-qc', `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`], { stdio: 'ignore' }); } catch { /* gone */ }
  }
  // What the contenders left in Redis (a hold total, a key's rpm bucket): every contender's prefix starts so (config.redis above).
  await clearRedisPrefix(`tgbench${process.pid}`, REDIS).catch(() => undefined);
};
main().catch((e) => { console.error(e); process.exitCode = 1; }).finally(cleanup);

// Realtime sessions at scale: N concurrent WS /v1/realtime sessions on `sim` (embedded store), each
// running one text turn; measures the gateway's RSS idle, with the sessions open and after they close,
// the time to open them, the turn latency, and checks the ledger moved by exactly the turns' usage.
// node bench/sessions.mjs [--sessions N] [--out FILE]
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import WebSocket from 'ws';
import { ROOT, start, stop, usage, percentiles } from './lib.mjs';

const run = promisify(execFile);
const CLI = join(ROOT, 'dist', 'cli.js');
const arg = (name, def) => { const i = process.argv.indexOf(`--${name}`); return i > 0 ? process.argv[i + 1] : def; };
const N = Number(arg('sessions', 1000));
const OUT = arg('out', null);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const mb = (b) => Math.round(b / 1024 / 1024);

/** sim-chat's price, as the gateway rounds it (once per response). */
const priceNano = (i, o) => { const num = BigInt(i) * 300_000_000n + BigInt(o) * 2_500_000_000n; return num === 0n ? 0n : (num + 999_999n) / 1_000_000n; };

function open(url, key) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${key}` } });
    const waiters = [];
    const events = [];
    ws.on('message', (d) => { events.push(JSON.parse(d.toString())); for (const w of waiters.splice(0)) w(); });
    ws.on('error', reject);
    ws.on('unexpected-response', (_q, res) => reject(new Error(`refused ${res.statusCode}`)));
    const until = async (pred) => { for (;;) { const e = events.find(pred); if (e) return e; await new Promise((r) => waiters.push(r)); } };
    ws.on('open', () => resolve({ ws, until, send: (e) => ws.send(JSON.stringify(e)) }));
  });
}

const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-sessions-'));
let gw;
try {
  const config = {
    listen: '127.0.0.1:0', upstreams: { sim: { sim: { token_delay_ms: 0 } } },
    models: [{ id: 'sim-chat', upstream: 'sim', kind: 'chat', simulated: true, input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }],
    limits: { default_rpm: 1_000_000, default_concurrency: 100_000 },
    payments: { provider: 'sandbox', allow_sandbox: true },
  };
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify(config));
  gw = await start('tollgate', process.execPath, [CLI, 'serve', '--config', cfg, '--data-dir', dir], { env: { TOLLGATE_LOG_REQUESTS: '0' }, ready: /"base_url":"(http:[^"]+)"/ });
  const base = gw.match[1];
  const cli = async (...a) => JSON.parse((await run(process.execPath, [CLI, ...a, '--json', '--config', cfg, '--data-dir', dir])).stdout);
  const acct = await cli('account', 'create', '--email', `bench${Date.now()}@example.com`, '--credit', '1000');
  const { key } = await cli('key', 'create', '--account', acct.account_id, '--scopes', 'llm');
  const url = `${base.replace(/^http/, 'ws')}/v1/realtime?model=sim-chat`;
  await sleep(1000);
  const idle = usage(gw.pid).rss;

  // Open N sessions, 50 at a time.
  const t0 = performance.now();
  const sessions = [];
  for (let i = 0; i < N; i += 50) {
    sessions.push(...await Promise.all(Array.from({ length: Math.min(50, N - i) }, () => open(url, key))));
  }
  await Promise.all(sessions.map((s) => s.until((e) => e.type === 'session.created')));
  const openMs = performance.now() - t0;
  await sleep(500);
  const openRss = usage(gw.pid).rss;

  // One text turn in every session at once.
  const latencies = [];
  let expected = 0n;
  const t1 = performance.now();
  await Promise.all(sessions.map(async (s, i) => {
    const a = performance.now();
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: `Session ${i} says hello.` }] } });
    s.send({ type: 'response.create', response: { output_modalities: ['text'], max_output_tokens: 16 } }); // a text turn (sessions start with audio out)
    const done = await s.until((e) => e.type === 'response.done');
    latencies.push(performance.now() - a);
    if (done.response.status !== 'completed') throw new Error(`session ${i}: ${JSON.stringify(done.response.status_details)}`);
    expected += priceNano(done.response.usage.input_tokens, done.response.usage.output_tokens);
  }));
  const turnsS = (performance.now() - t1) / 1000;
  const busyRss = usage(gw.pid).rss;

  await Promise.all(sessions.map((s) => new Promise((r) => { s.ws.once('close', r); s.ws.close(); })));
  let spent = 0n;
  for (let i = 0; i < 100; i++) {
    const show = await cli('account', 'show', acct.account_id);
    spent = 1000_000_000_000n - BigInt(Math.round(show.balance * 1e9));
    if (spent === expected) break;
    await sleep(100);
  }
  await sleep(1000);
  const closedRss = usage(gw.pid).rss;
  const lat = percentiles(latencies);
  const result = {
    sessions: N, open_ms: Math.round(openMs), turns_per_s: Math.round(N / turnsS),
    turn_ms: { p50: Math.round(lat.p50), p99: Math.round(lat.p99), max: Math.round(lat.max) },
    rss_mb: { idle: mb(idle), open: mb(openRss), after_turns: mb(busyRss), closed: mb(closedRss) },
    per_session_kb: Math.round((openRss - idle) / N / 1024),
    billed_exactly: spent === expected, spent_nd: String(spent), expected_nd: String(expected),
  };
  console.log(JSON.stringify(result, null, 2));
  if (OUT) writeFileSync(OUT, JSON.stringify(result, null, 2));
  if (!result.billed_exactly) process.exitCode = 1;
} finally {
  await stop(gw);
  rmSync(dir, { recursive: true, force: true });
}

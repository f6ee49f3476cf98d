// Gateway overhead in front of a real model server: llama.cpp's llama-server on the tiny model of
// test/upstreams, called directly and through Tollgate (embedded store), alternating, in one run.
// Sequential requests on one keep-alive connection each way, so the difference is what Tollgate adds to
// one request (auth, admission, relay, meter, the durable debit), not queueing. Checks that the balance
// moved by exactly price × the usage llama.cpp reported for every request that went through Tollgate.
//   node bench/llama.mjs [--requests N]   (after `bash test/upstreams/run --setup-only`; bench/llama runs both)
import http from 'node:http';
import { mkdtempSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir, cpus } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:net';
import { ROOT, start, stop, percentiles } from './lib.mjs';

const args = process.argv.slice(2);
const N = args.includes('--requests') ? Number(args[args.indexOf('--requests') + 1]) : 300;
const ROUNDS = 3;
const CLI = join(ROOT, 'dist/cli.js');
const VENV = join(ROOT, 'test/upstreams/.venv/bin');
const MODEL = join(ROOT, 'test/upstreams/.work/tiny-llama.gguf');
const work = mkdtempSync(join(tmpdir(), 'tollgate-bench-llama-'));
const procs = [];
const log = (...a) => console.error(new Date().toISOString().slice(11, 19), ...a);

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

/** One request on a keep-alive agent; resolves with [microseconds, parsed body]. */
function post(agent, url, headers, body) {
  const u = new URL(url);
  const t0 = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const r = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers } }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => {
        const us = Number(process.hrtime.bigint() - t0) / 1000;
        const text = Buffer.concat(parts).toString();
        if (res.statusCode !== 200) reject(new Error(`${url}: ${res.statusCode} ${text.slice(0, 300)}`));
        else resolve([us, text]);
      });
    });
    r.on('error', reject);
    r.end(body);
  });
}

const round = (v) => (v === null ? null : Math.round(v));

try {
  const llamaPort = await freePort();
  const llama = await start('llama-server', join(VENV, 'llama-server-vulkan'), ['-m', MODEL, '--host', '127.0.0.1', '--port', String(llamaPort),
    '-c', '4096', '-np', '2', '-t', '1', '--no-webui'], { readyUrl: `http://127.0.0.1:${llamaPort}/health` });
  procs.push(llama);
  const direct = `http://127.0.0.1:${llamaPort}`;
  const dir = join(work, 'tollgate');
  mkdirSync(dir, { recursive: true });
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify({
    listen: '127.0.0.1:0', payments: { provider: 'sandbox', allow_sandbox: true },
    limits: { default_rpm: 1_000_000_000, default_concurrency: 1000 },
    upstreams: { llama: { base_url: direct } },
    models: [{ id: 'tiny-llama', upstream: 'llama', upstream_model: 'tiny-llama.gguf', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 256 }],
  }));
  const env = { TOLLGATE_LOG_REQUESTS: '0' };
  const gw = await start('tollgate', process.execPath, [CLI, 'serve', '--config', cfg, '--data-dir', dir], { env, ready: /"base_url":"(http:[^"]+)"/ });
  procs.push(gw);
  const cli = (...a) => JSON.parse(execFileSync(process.execPath, [CLI, ...a, '--json', '--config', cfg, '--data-dir', dir], { env: { ...process.env, ...env } }).toString());
  const acct = cli('account', 'create', '--email', 'bench@llama.local', '--credit', '1000');
  const key = cli('key', 'create', '--account', acct.account_id).key;
  const via = gw.match[1].replace(/\/v1$/, '');

  const body = JSON.stringify({ model: 'tiny-llama', messages: [{ role: 'user', content: 'Hello, how are you today?' }], max_tokens: 16, temperature: 0 });
  const sides = { direct: { url: `${direct}/v1/chat/completions`, headers: {} }, tollgate: { url: `${via}/v1/chat/completions`, headers: { authorization: `Bearer ${key}` } } };
  const lat = { direct: [], tollgate: [] };
  let billedIn = 0n;
  let billedOut = 0n;
  let nano = 0n;
  for (let r = 0; r < ROUNDS + 1; r++) { // round 0 warms both paths up and is not counted
    for (const side of r % 2 ? ['direct', 'tollgate'] : ['tollgate', 'direct']) {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      for (let i = 0; i < (r === 0 ? 30 : N); i++) {
        const [us, text] = await post(agent, sides[side].url, sides[side].headers, body);
        if (r > 0) lat[side].push(us);
        if (side === 'tollgate') {
          const u = JSON.parse(text).usage;
          billedIn += BigInt(u.prompt_tokens);
          billedOut += BigInt(u.completion_tokens);
          nano += (BigInt(u.prompt_tokens) * 300_000_000n + BigInt(u.completion_tokens) * 2_500_000_000n + 999_999n) / 1_000_000n;
        }
      }
      agent.destroy();
    }
    log(`round ${r} done`);
  }
  await new Promise((r) => setTimeout(r, 1500));
  const show = cli('account', 'show', acct.account_id);
  const spentNano = 1000n * 1_000_000_000n - BigInt(Math.round(Number(show.balance) * 1e9));
  const d = percentiles(lat.direct);
  const t = percentiles(lat.tollgate);
  const result = {
    at: new Date().toISOString(), cpu: cpus()[0]?.model, cores: cpus().length, requests_per_side: N * ROUNDS,
    request: 'chat, 16 output tokens, non-streamed, sequential on one keep-alive connection',
    direct_us: { p50: round(d.p50), p90: round(d.p90), p99: round(d.p99) },
    tollgate_us: { p50: round(t.p50), p90: round(t.p90), p99: round(t.p99) },
    added_us: { p50: round(t.p50 - d.p50), p90: round(t.p90 - d.p90), p99: round(t.p99 - d.p99) },
    billed: { input_tokens: Number(billedIn), output_tokens: Number(billedOut), expected_nano: String(nano), balance_moved_nano: String(spentNano), exact: spentNano === nano },
  };
  mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
  writeFileSync(join(ROOT, 'bench/results/llama.json'), `${JSON.stringify(result, null, 2)}\n`);
  console.log(JSON.stringify(result, null, 2));
  if (!result.billed.exact) process.exitCode = 1;
} finally {
  for (const p of procs.reverse()) await stop(p);
  rmSync(work, { recursive: true, force: true });
}

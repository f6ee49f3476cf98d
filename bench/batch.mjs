// Batch throughput: lines per second through the batch worker, beside the same requests sent live through the
// gateway and straight to `sim`, at the same concurrency; then checks the ledger moved by exactly the outputs' price.
// node bench/batch.mjs [--lines N] [--concurrency C] [--store pglite|postgres]   (PostgreSQL: TOLLGATE_BENCH_PG, a database URL)
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ROOT, start, stop } from './lib.mjs';

const run = promisify(execFile);
const CLI = join(ROOT, 'dist', 'cli.js');
const arg = (name, def) => { const i = process.argv.indexOf(`--${name}`); return i > 0 ? process.argv[i + 1] : def; };
const N = Number(arg('lines', 2000));
const C = Number(arg('concurrency', 8));
const store = arg('store', 'pglite');

const body = (i) => ({ model: 'sim-chat', messages: [{ role: 'user', content: `Benchmark line ${i} asks for a short answer.` }], max_tokens: 16 });

/** N requests, C at a time; returns lines per second. */
async function drive(url, headers) {
  let next = 0;
  const t0 = performance.now();
  const worker = async () => {
    while (next < N) {
      const i = next++;
      const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body(i)) });
      if (r.status !== 200) throw new Error(`${url} answered ${r.status}: ${await r.text()}`);
      await r.arrayBuffer();
    }
  };
  await Promise.all(Array.from({ length: C }, worker));
  return N / ((performance.now() - t0) / 1000);
}

const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-batch-'));
let sim;
let gw;
try {
  sim = await start('sim', process.execPath, [CLI, 'sim', '--listen', '127.0.0.1:0', '--token-delay-ms', '0'], { ready: /"url":"(http:[^"]+)"/ });
  const simUrl = sim.match[1];
  const config = {
    listen: '127.0.0.1:0', upstreams: { sim: { base_url: simUrl } },
    models: [{ id: 'sim-chat', upstream: 'sim', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }],
    limits: { default_rpm: 1_000_000, default_concurrency: 1000 }, batches: { concurrency: C, poll_ms: 50 },
    payments: { provider: 'sandbox', allow_sandbox: true },
    ...(store === 'postgres' ? { database: { url_env: 'TOLLGATE_BENCH_PG' } } : {}),
  };
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify(config));
  const env = { TOLLGATE_LOG_REQUESTS: '0' };
  gw = await start('tollgate', process.execPath, [CLI, 'serve', '--config', cfg, '--data-dir', dir], { env, ready: /"base_url":"(http:[^"]+)"/ });
  const base = gw.match[1];
  const cli = async (...a) => JSON.parse((await run(process.execPath, [CLI, ...a, '--json', '--config', cfg, '--data-dir', dir])).stdout);
  const acct = await cli('account', 'create', '--email', `bench${Date.now()}@example.com`, '--credit', '1000');
  const { key } = await cli('key', 'create', '--account', acct.account_id, '--scopes', 'llm,batch');
  const auth = { authorization: `Bearer ${key}` };

  const direct = await drive(`${simUrl}/v1/chat/completions`, {});
  const live = await drive(`${base}/v1/chat/completions`, auth);
  const balance = async () => BigInt(Math.round((await cli('account', 'show', acct.account_id)).balance * 1e9));
  await new Promise((r) => setTimeout(r, 1000));
  const before = await balance();

  const text = Array.from({ length: N }, (_, i) => JSON.stringify({ custom_id: `l${i}`, method: 'POST', url: '/v1/chat/completions', body: body(i) })).join('\n');
  const form = new FormData();
  form.append('purpose', 'batch');
  form.append('file', new Blob([text]), 'bench.jsonl');
  const file = await (await fetch(`${base}/v1/files`, { method: 'POST', headers: auth, body: form })).json();
  const t0 = performance.now();
  const created = await (await fetch(`${base}/v1/batches`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }) })).json();
  let b;
  for (;;) {
    b = await (await fetch(`${base}/v1/batches/${created.id}`, { headers: auth })).json();
    if (['completed', 'failed', 'cancelled', 'expired'].includes(b.status)) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const wall = (performance.now() - t0) / 1000;
  if (b.status !== 'completed' || b.request_counts.completed !== N) throw new Error(`batch ended ${b.status}: ${JSON.stringify(b.request_counts)}`);
  const running = b.completed_at - b.in_progress_at;
  const out = (await (await fetch(`${base}/v1/files/${b.output_file_id}/content`, { headers: auth })).text()).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  let cost = 0n;
  for (const o of out) {
    const u = o.response.body.usage;
    const num = BigInt(u.prompt_tokens) * 300_000_000n + BigInt(u.completion_tokens) * 2_500_000_000n;
    cost += (num + 999_999n) / 1_000_000n;
  }
  await new Promise((r) => setTimeout(r, 1000));
  const moved = before - await balance();
  const result = {
    at: new Date().toISOString(), store, lines: N, concurrency: C,
    direct_rps: Math.round(direct), live_rps: Math.round(live),
    batch_lines_per_s: Math.round(N / wall), batch_wall_s: Number(wall.toFixed(2)), batch_running_s: running,
    ledger_exact: moved === cost, moved_nano: String(moved), priced_nano: String(cost),
  };
  console.log(JSON.stringify(result));
  mkdirSync(join(ROOT, 'bench', 'results'), { recursive: true });
  writeFileSync(join(ROOT, 'bench', 'results', `${result.at.replace(/:/g, '-').slice(0, 19)}-batch-${store}.json`), `${JSON.stringify(result, null, 2)}\n`);
  if (!result.ledger_exact) process.exitCode = 1;
} finally {
  await stop(gw);
  await stop(sim);
  rmSync(dir, { recursive: true, force: true });
}

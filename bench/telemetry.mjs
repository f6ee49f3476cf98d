// What tracing costs on the hot path: the same buffered chat load against gateways built from given dist/ trees, with telemetry off and on.
// `node bench/telemetry.mjs LABEL=path/to/dist/cli.js[+otlp] ...`: +otlp sets telemetry.otlp_endpoint to a local sink in this process.
// Each contender: embedded store (PGlite), sim upstream, one key; autocannon -c 8 for 15 s on POST /v1/chat/completions (max_tokens 8).
import { createServer } from 'node:http';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { start, stop, autocannon, usage } from './lib.mjs';

const contenders = process.argv.slice(2).map((a) => { const [label, spec] = a.split('='); const otlp = spec.endsWith('+otlp'); return { label, cli: otlp ? spec.slice(0, -5) : spec, otlp }; });
if (contenders.length === 0) { console.error('usage: node bench/telemetry.mjs LABEL=dist/cli.js[+otlp] ...'); process.exit(2); }

let spans = 0;
const sink = createServer((req, res) => { req.resume(); req.on('end', () => { spans += 1; res.end('{}'); }); });
await new Promise((r) => sink.listen(0, '127.0.0.1', r));
const sinkUrl = `http://127.0.0.1:${sink.address().port}`;
const models = [{ id: 'sim-chat', upstream: 'sim', kind: 'chat', simulated: true, input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }];
const rows = [];
for (const c of contenders) {
  const dir = mkdtempSync(join(tmpdir(), 'tg-bench-tel-'));
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify({ listen: '127.0.0.1:0', upstreams: { sim: { sim: {} } }, models, payments: { provider: 'sandbox', allow_sandbox: true },
    limits: { default_rpm: 10_000_000, default_concurrency: 1000 }, ...(c.otlp ? { telemetry: { otlp_endpoint: sinkUrl } } : {}) }));
  const env = { TOLLGATE_LOG_REQUESTS: '0' };
  const p = await start(c.label, process.execPath, [c.cli, 'serve', '--config', cfg, '--data-dir', dir], { env, ready: /"base_url":"(http:[^"]+)"/ });
  const base = p.match[1];
  const cli = (...a) => JSON.parse(execFileSync(process.execPath, [c.cli, ...a, '--json', '--config', cfg, '--data-dir', dir], { env: { ...process.env, ...env } }).toString());
  const acct = cli('account', 'create', '--email', `b${Date.now()}@example.com`, '--credit', '100000');
  const key = cli('key', 'create', '--account', acct.account_id).key;
  const args = ['-c', '8', '-m', 'POST', '-H', `authorization=Bearer ${key}`, '-H', 'content-type=application/json',
    '-b', JSON.stringify({ model: 'sim-chat', max_tokens: 8, messages: [{ role: 'user', content: 'Say hello.' }] }), `${base}/v1/chat/completions`];
  await autocannon(['-d', '3', ...args]); // warm-up
  const cpu0 = usage(p.pid);
  const r = await autocannon(['-d', '15', ...args]);
  const cpu1 = usage(p.pid);
  rows.push({ contender: c.label, rps: Math.round(r.requests.total / r.duration), p50_ms: r.latency.p50, p99_ms: r.latency.p99, non2xx: r.non2xx, errors: r.errors,
    cpu_ms_per_req: Math.round(((cpu1.cpu - cpu0.cpu) * 1e6) / Math.max(1, r.requests.total)) / 1000 });
  await stop(p);
  rmSync(dir, { recursive: true, force: true });
}
sink.close();
console.log(JSON.stringify({ rows, otlp_posts: spans }, null, 2));

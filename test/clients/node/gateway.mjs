// A real `tollgate serve` on its embedded default (PGlite in a fresh temp dir, simulated upstream,
// port 0) for the official-client suites, the operator CLI against the same store, and exact
// nanodollar billing checks read from GET /svc/v1/key.
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import OpenAI from 'openai';

const run = promisify(execFile);
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
// TOLLGATE_CLI points the suites at another build of the same CLI (default: this checkout's dist/).
export const CLI = process.env.TOLLGATE_CLI || join(ROOT, 'dist', 'cli.js');

/** Integer nanodollars per 1M tokens: [input, output]. */
const PRICES = {
  'sim-chat': [300_000_000n, 2_500_000_000n],
  'tollgate-27b': [300_000_000n, 2_500_000_000n],
  'sim-reasoner': [300_000_000n, 2_500_000_000n],
  'sim-embed': [20_000_000n, 0n],
  'gemma-3-27b-it': [300_000_000n, 2_500_000_000n],
  'bge-m3': [20_000_000n, 0n],
};

/** What the gateway must debit: one ceil over the whole request, in integer nanodollars. */
export function costNano(model, inputTokens, outputTokens = 0) {
  const [perIn, perOut] = PRICES[model];
  const num = BigInt(inputTokens) * perIn + BigInt(outputTokens) * perOut;
  return (num + 999_999n) / 1_000_000n;
}

/** A JSON number's source text in dollars ("4.9995662", "5", "1.5e-7") as exact integer nanodollars. */
export function dollarsToNano(text) {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!m) throw new Error(`not a JSON number: ${text}`);
  const [, sign, whole, frac = '', exp = '0'] = m;
  const shift = 9 + Number(exp) - frac.length; // value = (whole.frac digits) * 10^(exp - frac.length)
  let n = BigInt(whole + frac);
  if (shift >= 0) n *= 10n ** BigInt(shift);
  else {
    const d = 10n ** BigInt(-shift);
    if (n % d !== 0n) throw new Error(`${text} has more than 9 decimals`);
    n /= d;
  }
  return sign ? -n : n;
}

/**
 * Models offered under other names than the ones `sim` serves them by (as the example config's gemma and
 * bge-m3 are), and an alias: replies must name the id the client asked for, or the alias's model's id.
 */
export const RENAMED_MODELS = [
  { id: 'gemma-3-27b-it', upstream: 'sim', upstream_model: 'sim-chat', aliases: ['gemma-27b'], kind: 'chat',
    input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 },
  { id: 'bge-m3', upstream: 'sim', upstream_model: 'sim-embed', kind: 'embedding', input_per_mtok: '0.02', max_output_tokens: 1 },
];

/** The embedded default; or, given `models`, a config file serving them from an in-process `sim`. */
export async function startGateway({ models } = {}) {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build the gateway first (npm run build)`);
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-nodeclient-'));
  const env = { ...process.env, TOLLGATE_LOG_REQUESTS: '0' };
  const configArgs = [];
  if (models) {
    const path = join(dir, 'config.json');
    writeFileSync(path, JSON.stringify({ upstreams: { sim: { sim: {} } }, models, payments: { provider: 'sandbox', allow_sandbox: true } }));
    configArgs.push('--config', path);
  }
  const proc = spawn(process.execPath, [CLI, 'serve', '--data-dir', dir, '--listen', '127.0.0.1:0', ...configArgs],
    { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stderr.on('data', (d) => { out += d; });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${out}`)), 60_000);
    let pending = '';
    proc.stdout.on('data', (d) => {
      out += d;
      pending += d;
      const lines = pending.split('\n');
      pending = lines.pop();
      for (const line of lines) {
        if (!line.startsWith('{')) continue;
        try {
          const j = JSON.parse(line);
          if (j.msg === 'listening') { clearTimeout(timer); resolve(j.base_url); }
        } catch { /* not a log line */ }
      }
    });
    proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`the gateway exited with ${code}:\n${out}`)); });
  });
  const exited = new Promise((resolve) => proc.once('exit', resolve));

  const gw = {
    url,
    dir,
    async cli(...args) {
      const { stdout } = await run(process.execPath, [CLI, ...args, '--json', '--data-dir', dir, ...configArgs], { env });
      return JSON.parse(stdout);
    },
    /** A fresh account with `credit` dollars and one key: {accountId, key, prefix}. */
    async account(credit = '5', { rpm, concurrency, spendLimit, period = 'monthly', scopes } = {}) {
      const acct = await gw.cli('account', 'create', '--email', `node-${randomBytes(5).toString('hex')}@example.com`,
        '--credit', String(credit));
      const args = ['key', 'create', '--account', acct.account_id];
      if (scopes) args.push('--scopes', scopes);
      if (rpm !== undefined) args.push('--rpm', String(rpm));
      if (concurrency !== undefined) args.push('--concurrency', String(concurrency));
      if (spendLimit !== undefined) args.push('--spend-limit', String(spendLimit), '--period', period);
      const key = await gw.cli(...args);
      return { accountId: acct.account_id, key: key.key, prefix: key.prefix };
    },
    client(key, base = '/v1') {
      return new OpenAI({ apiKey: key, baseURL: url + base, maxRetries: 0, timeout: 30_000 });
    },
    /** GET /svc/v1/key: the parsed body, plus every dollar field as exact nanodollars (from the raw text). */
    async keyInfo(key) {
      const res = await fetch(`${url}/svc/v1/key`, { headers: { authorization: `Bearer ${key}` } });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`GET /svc/v1/key answered ${res.status}: ${text}`);
      const nano = {};
      for (const field of ['balance', 'usage_daily', 'usage_monthly', 'limit', 'limit_remaining']) {
        const m = new RegExp(`"${field}":(-?[0-9][0-9.eE+-]*)`).exec(text);
        if (m) nano[field] = dollarsToNano(m[1]);
      }
      return { ...JSON.parse(text), nano };
    },
    async balance(key) {
      const { nano } = await gw.keyInfo(key);
      if (nano.balance === undefined) throw new Error('GET /svc/v1/key has no numeric balance');
      return nano.balance;
    },
    /** The balance once it has moved away from `before` (streams settle just after their last byte). */
    async settledBalance(key, before, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs;
      let after = await gw.balance(key);
      while (after === before && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        after = await gw.balance(key);
      }
      return after;
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return gw;
}

/** The JSON payloads of an SSE body, in order, up to `data: [DONE]`. */
export function sseData(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const payload = line.slice(5).trim();
    if (payload === '[DONE]') break;
    out.push(JSON.parse(payload));
  }
  return out;
}

export const HELLO = [{ role: 'user', content: 'Say hello to the gateway.' }];

export const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city'],
    },
  },
};

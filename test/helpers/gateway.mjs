// Boots a real `tollgate serve` process on port 0 with its own store (PGlite dir or a fresh PostgreSQL
// database) and Redis key prefix, and tears it all down after the test.
import { spawn, execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync, existsSync, readdirSync, readFileSync, cpSync, renameSync, mkdirSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import pg from '../../node_modules/pg/lib/index.js';

const run = promisify(execFile);
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CLI = join(ROOT, 'dist', 'cli.js');
export const PG_ADMIN_URL = process.env.TOLLGATE_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.TOLLGATE_TEST_REDIS ?? 'redis://127.0.0.1:6379';
/** The Node that runs the gateway and its CLI: TOLLGATE_TEST_NODE (another version, test/node-versions), else this one. */
export const NODE = process.env.TOLLGATE_TEST_NODE || process.execPath;

/** A Node major's binary from npm's node-<os>-<arch> package (installed into .node-versions/ once). */
export function nodeBinary(major) {
  return execFileSync(join(ROOT, 'test', 'node-versions'), [String(major)], { encoding: 'utf8' }).trim();
}

export const TEST_MODELS = [
  { id: 'sim-chat', upstream: 'sim', aliases: ['tollgate-27b'], kind: 'chat', simulated: true, input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 },
  { id: 'sim-reasoner', upstream: 'sim', kind: 'chat', simulated: true, input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 },
  { id: 'sim-embed', upstream: 'sim', kind: 'embedding', simulated: true, input_per_mtok: '0.02', output_per_mtok: '0', max_output_tokens: 1 },
  { id: 'sim-tts-clone', upstream: 'sim', kind: 'tts', simulated: true, voice_cloning: true, per_mchar: '30', speech_params: ['seed', 'language_code', 'previous_text', 'next_text'] },
  { id: 'sim-sts', upstream: 'sim', kind: 'sts', simulated: true, aliases: ['eleven_english_sts_v2', 'eleven_multilingual_sts_v2'], audio_in_per_minute: '0.18' },
  { id: 'sim-tts', upstream: 'sim', kind: 'tts', simulated: true, aliases: ['tts-1', 'tts-1-hd', 'gpt-4o-mini-tts', 'eleven_multilingual_v2', 'eleven_v3', 'eleven_flash_v2_5', 'eleven_flash_v2', 'eleven_turbo_v2_5', 'eleven_turbo_v2', 'eleven_monolingual_v1', 'eleven_multilingual_v1'], per_mchar: '15', speech_params: ['seed', 'language_code', 'previous_text', 'next_text'] },
  { id: 'sim-stt', upstream: 'sim', kind: 'stt', simulated: true, aliases: ['whisper-1', 'gpt-4o-transcribe', 'gpt-4o-mini-transcribe', 'scribe_v1', 'scribe_v1_experimental', 'scribe_v2'], audio_in_per_minute: '0.006' },
];

/** A fresh PostgreSQL database; dropped by the returned cleanup. */
export async function freshDatabase() {
  const name = `tg_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = PG_ADMIN_URL.replace(/\/[^/]*$/, `/${name}`);
  return {
    url,
    async drop() {
      const c = new pg.Client({ connectionString: PG_ADMIN_URL });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

/**
 * An embedded store made once per test run and copied into each new PGlite data dir: initdb in WASM
 * and the migrations cost a new store ~5 s and ~8 s of CPU, a copy of the result 40 MB of disk and
 * ~1 s at start (the gateway opens an existing store). The copy is what the gateway itself makes on
 * first start (openPglite in a child: PGlite's initdb, then every migration), made by the same build,
 * so the template is keyed by the migrations, the PGlite version and the PGlite settings. A test of
 * the first start itself passes `freshStore: true`.
 */
let templateDir = null;

/** The operator commands gw.cli runs in this process (see there); the rest start the CLI. */
const IN_PROCESS_COMMANDS = new Set(['account create', 'account show', 'account credit', 'account list', 'key create', 'key revoke', 'key limits', 'key list']);
const READ_COMMANDS = new Set(['account show', 'account list', 'key list']);
let cliMods = null;
function cliModules() {
  const dist = (f) => import(join(ROOT, 'dist', f));
  cliMods ??= Promise.all([dist('cli-args.js'), dist('ops.js'), dist('server/admin.js'), dist('store/db.js'), dist('ledger/settle.js')])
    .then(([args, ops, admin, db, settle]) => ({ args, ops, admin, db, settle }));
  return cliMods;
}
async function pgliteTemplate() {
  if (templateDir) return templateDir;
  const migrations = join(ROOT, 'dist', 'store', 'migrations');
  const h = createHash('sha256');
  for (const f of readdirSync(migrations).sort()) h.update(f).update(readFileSync(join(migrations, f)));
  h.update(readFileSync(join(ROOT, 'node_modules', '@electric-sql', 'pglite', 'package.json')));
  h.update(readFileSync(join(ROOT, 'dist', 'store', 'pglite-conf.js')));
  const base = join(ROOT, 'test', 'artifacts', 'pglite-template');
  const dir = join(base, h.digest('hex').slice(0, 16));
  if (!existsSync(join(dir, 'PG_VERSION'))) {
    // Made in a scratch dir and renamed into place: test files running side by side may race to make it.
    mkdirSync(base, { recursive: true });
    const scratch = mkdtempSync(join(base, 'making-'));
    const code = `const { openPglite } = await import(${JSON.stringify(join(ROOT, 'dist', 'store', 'db.js'))}); const db = await openPglite(process.argv[1]); await db.close();`;
    await run(process.execPath, ['--input-type=module', '-e', code, scratch]);
    try { renameSync(join(scratch, 'pg'), dir); } catch (e) { if (!existsSync(join(dir, 'PG_VERSION'))) throw e; }
    rmSync(scratch, { recursive: true, force: true });
  }
  templateDir = dir;
  return dir;
}

/**
 * options: { store: 'pglite' | 'postgres', freshStore (pglite: initdb at start, not a copy of the template), spawnCli (gw.cli always starts the CLI process), redis: boolean, redisUrl (another Redis), embedded: boolean (no --config at all),
 *            upstreams, models, limits, batches, voices, database: {url} (share one), redisPrefix (share one), env, workers,
 *            payments (default: the sandbox, with the allow_sandbox flag a config file needs), publicUrl,
 *            node (the Node binary to run it on; default NODE), nodeArgs (Node/V8 options before the script, e.g. ['--trace-gc']), frontend ('uws' | 'node' | 'auto': the config's `frontend`),
 *            status, telemetry (the config's sections of those names) }
 * TOLLGATE_FRONTEND in the environment is passed on (it overrides the config's `frontend`).
 */
export async function startGateway(t, options = {}) {
  const store = options.store ?? 'postgres';
  const dir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'tollgate-test-'));
  const env = { ...process.env, TOLLGATE_LOG_REQUESTS: '0', ...(options.env ?? {}) };
  const cleanups = [];
  let configPath = null;
  let redisPrefix = null;
  let db = options.database ?? null;
  if (!options.embedded) {
    const config = {
      listen: '127.0.0.1:0',
      upstreams: options.upstreams ?? { sim: { sim: {} } },
      models: options.models ?? TEST_MODELS,
      limits: options.limits ?? {},
      ...(options.batches ? { batches: options.batches } : {}),
      ...(options.voices ? { voices: options.voices } : {}),
      ...(options.realtime ? { realtime: options.realtime } : {}),
      payments: options.payments ?? { provider: 'sandbox', allow_sandbox: true },
      ...(options.publicUrl ? { public_url: options.publicUrl } : {}),
      ...(options.workers ? { workers: options.workers } : {}),
      ...(options.frontend ? { frontend: options.frontend } : {}),
      ...(options.status ? { status: options.status } : {}),
      ...(options.telemetry ? { telemetry: options.telemetry } : {}),
    };
    if (store === 'postgres') {
      if (!db) { db = await freshDatabase(); cleanups.push(() => db.drop()); }
      env.TOLLGATE_TEST_DATABASE_URL = db.url;
      config.database = { url_env: 'TOLLGATE_TEST_DATABASE_URL', pool_size: 8 };
    }
    if (options.redis) {
      redisPrefix = options.redisPrefix ?? `tgtest:${randomBytes(5).toString('hex')}:`;
      const prefix = redisPrefix;
      env.TOLLGATE_TEST_REDIS_URL = options.redisUrl ?? REDIS_URL;
      config.redis = { url_env: 'TOLLGATE_TEST_REDIS_URL', key_prefix: prefix };
      if (!options.redisPrefix) cleanups.push(() => clearRedisPrefix(prefix, options.redisUrl));
    }
    configPath = join(dir, 'config.json');
    writeFileSync(configPath, JSON.stringify(config, null, 2));
  }
  if ((store === 'pglite' || options.embedded) && !options.freshStore && !existsSync(join(dir, 'pg', 'PG_VERSION'))) {
    cpSync(await pgliteTemplate(), join(dir, 'pg'), { recursive: true });
  }
  const args = ['serve', '--data-dir', dir, '--listen', '127.0.0.1:0'];
  if (configPath) args.push('--config', configPath);
  const node = options.node ?? NODE;
  const proc = spawn(node, [...(options.nodeArgs ?? []), CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const output = { stdout: '', stderr: '' };
  proc.stderr.on('data', (d) => { output.stderr += d; });
  const starting = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway did not start:\n${output.stdout}\n${output.stderr}`)), 60_000);
    proc.stdout.on('data', (d) => {
      output.stdout += d;
      for (const line of output.stdout.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          const j = JSON.parse(line);
          if (j.msg === 'listening') { clearTimeout(timer); resolve(j); }
        } catch { /* partial line */ }
      }
    });
    proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`gateway exited with ${code}:\n${output.stdout}\n${output.stderr}`)); });
  });
  // A gateway that never said it listens is killed and its database and Redis keys dropped here: the
  // test fails, and nothing it started is left running to load the machine for the tests after it.
  const listening = await starting.catch(async (e) => {
    proc.kill('SIGKILL');
    for (const c of cleanups) await Promise.resolve().then(c).catch(() => undefined);
    throw e;
  });
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
  let opsDb = null;
  /** null: no store reachable here (an embedded gateway that is not running), so the CLI process opens it. */
  async function operatorInProcess(command, rest) {
    const m = await cliModules();
    const { positional, flags } = m.args.parseArgs(rest);
    const args = m.args.operatorArgs(command, positional, flags);
    const fail = (message) => { throw new Error(`tollgate: ${message}`); };
    // The ledger commit follows a response without the response waiting on it: a read made at once could
    // miss a debit the client has seen (a CLI process took ~0.3 s to start, and hid that). A read here
    // first waits for this gateway's debits to land, as an operator's read a moment later would see them.
    if (READ_COMMANDS.has(command)) await debitsLanded();
    try {
      if (db) {
        opsDb ??= m.db.openPostgres(db.url, 2);
        const d = await opsDb;
        const result = await m.ops.runOp({ db: d, settler: new m.settle.Settler(d, { balance: () => undefined, spend: () => undefined }), baseUrl: gw.url }, command, args);
        return JSON.parse(JSON.stringify(result));
      }
      const remote = await m.admin.callAdmin(dir, command, args);
      if (!remote) return null;
      if (!remote.ok) fail(remote.error ?? 'failed');
      return remote.result;
    } catch (e) {
      if (e instanceof m.ops.OpError) fail(e.message);
      throw e;
    }
  }
  /**
   * Waits (up to 5 s) until no debit is pending. /metrics counts the debits of the instance that answers
   * it, so with `workers` (or instances sharing a Redis prefix) it can say 0 while another still has some:
   * with Redis, the pending debits of every instance are read there (each `{account}:pend` hash, and each
   * account's settle queue, `{account}:setq`).
   */
  async function debitsLanded() {
    const until = Date.now() + 5000;
    while (proc.exitCode === null && proc.signalCode === null && Date.now() < until) {
      const pending = redisPrefix ? await pendingInRedis() : await pendingInMetrics();
      if (pending === 0) return;
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  async function pendingInMetrics() {
    const m = await fetch(`${gw.url}/metrics`).then((r) => r.text()).catch(() => null);
    const pending = m && /^tollgate_pending_debits (\d+)/m.exec(m);
    return pending ? Number(pending[1]) : 0;
  }
  let pendRedis = null;
  async function pendingInRedis() {
    if (!pendRedis) {
      const { Redis } = await import('../../node_modules/ioredis/built/index.js');
      pendRedis = new Redis(options.redisUrl ?? REDIS_URL);
      cleanups.push(() => pendRedis.quit());
    }
    let cursor = '0';
    let n = 0;
    do {
      // A debit is pending from its settle on: first in the account's settle queue (`setq`, until a script applies it), then in `pend`.
      const [next, keys] = await pendRedis.scan(cursor, 'MATCH', `${redisPrefix}*`, 'COUNT', 500);
      cursor = next;
      for (const k of keys) {
        if (k.endsWith(':pend')) n += await pendRedis.hlen(k);
        else if (k.endsWith(':setq')) n += await pendRedis.llen(k);
      }
    } while (cursor !== '0');
    return n;
  }
  const gw = {
    proc, dir, output, db, exited, configPath, redisPrefix,
    /** Resolves once no debit is pending (or after 5 s): the ledger read then holds every debit a client was answered for. */
    debitsLanded,
    // With a public_url the printed base is that URL; tests reach the listener itself.
    url: options.publicUrl ? `http://127.0.0.1:${listening.port}` : listening.base_url,
    /**
     * Runs a CLI command against the same store, returning its --json object. The operator commands run
     * here as the CLI runs them (its own argument parser, then runOp on the database, or the running
     * embedded gateway's admin socket), without a Node process per call: one costs ~0.3 s of CPU, and the
     * suites make hundreds. `spawnCli: true` (or a command not in the list) runs the real CLI process.
     */
    async cli(...cliArgs) {
      const command = `${cliArgs[0]} ${cliArgs[1]}`;
      if (IN_PROCESS_COMMANDS.has(command) && !options.spawnCli) {
        const r = await operatorInProcess(command, cliArgs.slice(2));
        if (r) return r;
      }
      const full = [CLI, ...cliArgs, '--json', '--data-dir', dir, ...(configPath ? ['--config', configPath] : [])];
      const { stdout } = await run(node, full, { env });
      return JSON.parse(stdout);
    },
    /** An account with `credit` dollars and one key with the given options; returns {account, key, prefix}. */
    async account(credit = '10', keyOpts = {}) {
      const email = `u${randomBytes(5).toString('hex')}@example.com`;
      const acct = await gw.cli('account', 'create', '--email', email, '--credit', String(credit));
      const key = await gw.newKey(acct.account_id, keyOpts);
      return { account: acct.account_id, key: key.key, prefix: key.prefix };
    },
    async newKey(accountId, o = {}) {
      const a = ['key', 'create', '--account', accountId];
      if (o.scopes) a.push('--scopes', o.scopes);
      if (o.label) a.push('--label', o.label);
      if (o.spendLimit) a.push('--spend-limit', String(o.spendLimit), '--period', o.period ?? 'monthly');
      if (o.rpm) a.push('--rpm', String(o.rpm));
      if (o.concurrency) a.push('--concurrency', String(o.concurrency));
      if (o.tpm) a.push('--tpm', String(o.tpm));
      if (o.charsPerMin) a.push('--chars-per-min', String(o.charsPerMin));
      if (o.audioSecsPerMin) a.push('--audio-secs-per-min', String(o.audioSecsPerMin));
      return gw.cli(...a);
    },
    fetch(path, init = {}) {
      // A request the gateway never answered says why as far as this side can tell: its socket error, and
      // whether the gateway process was still running (with the end of its log).
      return fetch(gw.url + path, init).catch((e) => {
        if (!(e instanceof TypeError)) throw e;
        const state = proc.exitCode !== null || proc.signalCode !== null ? `the gateway had exited (${proc.exitCode ?? proc.signalCode})` : 'the gateway was running';
        throw new TypeError(`${e.message} (${init.method ?? 'GET'} ${path}: ${e.cause?.code ?? e.cause?.message ?? 'no cause'}; ${state}; its log ends:\n${output.stderr.slice(-1500)})`, { cause: e.cause });
      });
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) { proc.kill('SIGTERM'); }
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
  t.after(async () => {
    await gw.stop();
    if (opsDb) await (await opsDb).close().catch(() => undefined);
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    if (!options.dataDir) rmSync(dir, { recursive: true, force: true });
  });
  return gw;
}

export async function clearRedisPrefix(prefix, url = REDIS_URL) {
  const { Redis } = await import('../../node_modules/ioredis/built/index.js');
  const r = new Redis(url);
  let cursor = '0';
  do {
    const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
    cursor = next;
    if (keys.length) await r.del(...keys);
  } while (cursor !== '0');
  await r.quit();
}

export function bearer(key) {
  return { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
}

export function chatBody(extra = {}) {
  return JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'Say hello to the gateway.' }], ...extra });
}

/** Prices tokens exactly as the embedded default does: $0.30 in, $2.50 out per 1M tokens, one ceil. */
export function priceNano(input, output, inPerM = 300_000_000n, outPerM = 2_500_000_000n) {
  const num = BigInt(input) * inPerM + BigInt(output) * outPerM;
  return num === 0n ? 0n : (num + 999_999n) / 1_000_000n;
}

export function dollarsToNano(d) {
  const [w, f = ''] = String(d).split('.');
  return BigInt(w) * 1_000_000_000n + BigInt(f.padEnd(9, '0').slice(0, 9));
}

/** An account's balance in nanodollars, from the operator CLI's `account show`. */
export async function balanceNano(gw, account) {
  return BigInt(Math.round((await gw.cli('account', 'show', account)).balance * 1e9));
}

/** After a test: balance equals the ledger's sum and no holds are left open. */
export async function assertInvariants(assert, gw, accountId) {
  const show = await gw.cli('account', 'show', accountId);
  assert.equal(show.balance, show.ledger_total, 'balance equals the sum of the ledger');
  const m = await (await gw.fetch('/metrics')).text();
  const holds = /^tollgate_open_holds (\d+)/m.exec(m);
  assert.ok(holds, 'metrics expose open holds');
  assert.equal(Number(holds[1]), 0, 'no holds left open');
}

#!/usr/bin/env node
// Command-line entry: serve | sim | account ... | key ...  (see README for the contract).
import { embeddedConfig, loadConfigFile, splitHostPort, baseUrlOf, ConfigError, type Config } from './config.js';
// What only `serve` and `sim` use (the gateway, its routes and front ends, the simulated upstream) is
// imported when they run: an operator command (account ..., key ...) then starts in about half the time.
import type { Gateway as GatewayType } from './server/app.js';
import { callAdmin } from './server/admin.js';
import { log, setRequestLogging } from './observe/log.js';
import { isWorker, reportReady, startWorkers, workerPort } from './server/workers.js';
import { lockDataDir, DataDirBusy } from './store/lock.js';
import { embeddedStoreExists, openPglite, openPostgres, type Db } from './store/db.js';
import { Settler } from './ledger/settle.js';
import { runOp, OpError, type OpArgs, type OpsDeps } from './ops.js';
import { credit } from './ledger/credit.js';
import { createAccount, accountByEmail } from './store/accounts.js';
import { createKey } from './store/keys.js';
import { consoleUserFor, createSigninLink, hasPassword } from './store/console.js';
import { cliCommand, dataDirOf } from './cli-hints.js';
import { nanoToDecimal } from './money.js';
import { parseArgs, operatorArgs } from './cli-args.js';

const USAGE = `usage: tollgate <command>
  serve [--config FILE] [--data-dir DIR] [--listen HOST:PORT] [--frontend auto|uws|node]
  sim [--listen HOST:PORT] [--token-delay-ms N]
  account create --email EMAIL [--credit DOLLARS] [--json]
  account list [--email TEXT] [--limit N] [--json]
  account show ACCOUNT [--json]
  account credit ACCOUNT --amount DOLLARS [--reason TEXT] [--json]
  account sign-in-link ACCOUNT [--json]
  key create --account ACCOUNT [--label L] [--scopes llm,voice,batch] [--spend-limit DOLLARS --period daily|monthly] [--rpm N] [--concurrency N]
             [--tpm N] [--chars-per-min N] [--audio-secs-per-min N] [--fallback true|false] [--json]
  key limits PREFIX [--rpm N|none] [--concurrency N|none] [--tpm N|none] [--chars-per-min N|none] [--audio-secs-per-min N|none] [--fallback true|false] [--json]
  key revoke KEY_OR_PREFIX [--json]
  key list --account ACCOUNT [--json]
ACCOUNT is an account id (acct_...) or its email. Every command takes --config FILE / --data-dir DIR
to reach the same store as serve.`;

function loadConfig(flags: OpArgs): Config {
  const base = typeof flags.config === 'string' ? loadConfigFile(flags.config) : embeddedConfig();
  if (typeof flags.listen !== 'string') return base;
  const [host, port] = splitHostPort(flags.listen);
  return Object.freeze({ ...base, listen: { host, port } });
}

async function serve(flags: OpArgs): Promise<void> {
  let config = loadConfig(flags);
  const dir = dataDirOf(flags);
  if (process.env.TOLLGATE_LOG_REQUESTS === '0') setRequestLogging(false);
  // Before anything starts: a front end that cannot load on this Node stops the start here, saying what works.
  const { frontEndChoice, resolveFrontEnd } = await import('./server/frontend.js');
  const front = resolveFrontEnd(frontEndChoice(config.frontend, flags.frontend));
  if (config.workers > 1 && !isWorker()) return servePrimary(config, flags, front.frontEnd.description);
  if (isWorker()) config = Object.freeze({ ...config, listen: { ...config.listen, port: workerPort() } });
  const unlock = config.databaseUrl ? () => undefined : lockDataDir(dir);
  const [{ Gateway }, { openServices, closeServices }, { batchEndpoints }, { mounts, fallbackFamily }, { startAdminSocket }, { boundHeapGrowth, keepMemoryReducerAwake }] = await Promise.all([
    import('./server/app.js'), import('./services.js'), import('./families/alpha/batches.js'), import('./routes.js'), import('./server/admin.js'), import('./server/heap.js'),
  ]);
  const s = await openServices(config, dir, batchEndpoints);
  const gw: GatewayType = new Gateway(s, mounts(s), fallbackFamily, front.frontEnd);
  await gw.listen();
  const heap = boundHeapGrowth();
  keepMemoryReducerAwake();
  const base = gw.baseUrl;
  const deps: OpsDeps = { db: s.db, settler: s.settler, onKey: (k) => s.cache.putKey(k), baseUrl: base };
  const admin = s.db.kind === 'pglite' ? await startAdminSocket(dir, deps) : null;
  const cli = cliCommand(flags, { dataDir: dir, embedded: !config.databaseUrl });
  const lines = banner(
    `Tollgate is running${config.embedded ? ` on its embedded default (PGlite in ${dir}, in-process limits, simulated upstream "sim", payment sandbox)` : ''}.`,
    base,
    config.embedded ? await demoLines(deps, config, cli) : keyHint(cli),
    `${front.frontEnd.description}; ${front.note}`,
  );
  if (isWorker()) {
    log('info', 'worker serving', { pid: process.pid, port: gw.port });
    reportReady();
  } else {
    process.stdout.write(`${lines.join('\n')}\n`);
    warnSandbox(config);
    log('info', 'listening', { base_url: base, port: gw.port, store: s.db.kind, limits: s.limiter.kind, frontend: front.frontEnd.name });
  }
  onStopSignal(async (signal) => {
    log('info', 'draining', { signal });
    admin?.close();
    await gw.stop();
    await closeServices(s);
    heap?.stop();
    unlock();
  });
}

/** The start-up lines: a headline, the API and console URLs, and how to get a key (commands that work as printed). */
function banner(headline: string, base: string, keyLines: string[], frontEnd: string): string[] {
  return [headline, `  OpenAI-shaped API:     ${base}/v1   (also ${base}/alpha/v1; key in Authorization: Bearer)`,
    `  ElevenLabs-shaped API: ${base}/beta   (key in the xi-api-key header)`, `  Console:               ${base}/console`, ...keyLines,
    `  Front end:             ${frontEnd}`];
}

type Cli = (args: string) => string;

function keyHint(cli: Cli): string[] {
  return [
    `  Accounts:              ${cli('account list')}`,
    `  API keys:              ${cli('account create --email EMAIL --credit DOLLARS')}`,
    `                         ${cli('key create --account ACCOUNT')}   (an account id or email)`,
  ];
}

/**
 * The embedded default's demo account: made at first start with its credit, a key (shown that once) and
 * a one-time console sign-in link; at every later start, the commands that make another of each.
 */
async function demoLines(deps: OpsDeps, config: Config, cli: Cli): Promise<string[]> {
  const email = config.demo.email;
  const existing = await accountByEmail(deps.db, email);
  if (existing) {
    const user = await consoleUserFor(deps.db, existing);
    return [
      `  API keys:              ${cli(`key create --account ${existing.id}`)}   (the demo account, ${email})`,
      hasPassword(user)
        ? `  Console log-in:        ${email} with the password set for it`
        : `  Console sign-in:       ${cli(`account sign-in-link ${email}`)}   (prints a one-time link)`,
    ];
  }
  const acct = await createAccount(deps.db, email);
  await credit(deps, acct.id, config.demo.credit, 'sandbox credit for the demo account', `credit:demo:${acct.id}`);
  const key = (await createKey(deps.db, { accountId: acct.id, label: 'first key' })).key;
  const link = await createSigninLink(deps.db, (await consoleUserFor(deps.db, acct)).id);
  return [
    `  API key (shown once):  ${key}`,
    `                         for ${email} (account ${acct.id}), with $${nanoToDecimal(config.demo.credit)} of sandbox credit`,
    `  Console sign-in:       ${deps.baseUrl}/console/signin/${link.token}`,
    '                         (one-time link, valid 24 hours: it signs in as the demo account; set a password there)',
    `  More keys:             ${cli(`key create --account ${acct.id}`)}`,
  ];
}

/** A config file that runs the sandbox says so at every start: its top-ups credit balances without taking money. */
function warnSandbox(config: Config): void {
  if (config.payments.provider !== 'sandbox' || config.embedded) return;
  log('warn', 'payments run on the sandbox provider (payments.allow_sandbox): top-ups credit balances and no real money is taken', {});
}

/** On the first SIGTERM or SIGINT: runs `drain`, logs `stopped` and exits 0 (later signals are ignored). */
function onStopSignal(drain: (signal: string) => Promise<void>): void {
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    void drain(signal).then(() => { log('info', 'stopped', {}); process.exit(0); });
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

/** `workers: N`: this process only starts, restarts and stops N gateway processes on one port. */
async function servePrimary(config: Config, flags: OpArgs, frontEnd: string): Promise<void> {
  const { port, stop } = await startWorkers(config.workers, config.listen.host, config.listen.port, config.payments.webhookSecret);
  const base = baseUrlOf(config, port);
  const hint = keyHint(cliCommand(flags, { dataDir: dataDirOf(flags), embedded: false }));
  process.stdout.write(`${banner(`Tollgate is running as ${config.workers} worker processes on one port.`, base, hint, frontEnd).join('\n')}\n`);
  warnSandbox(config);
  log('info', 'listening', { base_url: base, port, workers: config.workers, store: 'postgres', limits: 'redis' });
  onStopSignal(async (signal) => {
    log('info', 'draining', { signal, workers: config.workers });
    await stop();
  });
}

async function simCommand(flags: OpArgs): Promise<void> {
  const [host, port] = splitHostPort(typeof flags.listen === 'string' ? flags.listen : '127.0.0.1:8090');
  const delay = typeof flags.token_delay_ms === 'string' ? Number(flags.token_delay_ms) : 0;
  const { startSim } = await import('./sim/index.js');
  const sim = await startSim({ host, port, tokenDelayMs: delay });
  process.stdout.write(`${JSON.stringify({ msg: 'sim listening', url: sim.url, note: 'simulated upstream: test infrastructure, not a model' })}\n`);
  const stop = () => { void sim.close().then(() => process.exit(0)); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

async function operator(command: string, positional: string[], flags: OpArgs): Promise<void> {
  const args = operatorArgs(command, positional, flags);
  const config = loadConfig(flags);
  const dir = dataDirOf(flags);
  const local = (db: Db) => runOp({ db, settler: new Settler(db, noListener), baseUrl: baseUrlOf(config, config.listen.port) }, command, args);
  let result: Record<string, unknown>;
  if (!config.databaseUrl) {
    const remote = await callAdmin(dir, command, args);
    if (remote) {
      if (!remote.ok) throw new OpError(remote.error ?? 'failed', remote.exit_code ?? 1);
      result = remote.result!;
    } else {
      newStoreCheck(command, dir, flags);
      result = await withStore(config, dir, local);
    }
  } else result = await withStore(config, dir, local);
  if (flags.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else process.stdout.write(`${human(result)}\n`);
}

const noListener = { balance: () => undefined, spend: () => undefined };

/**
 * No server answers on this data dir and no store is in it: a CLI run would make a new, empty one, which
 * no running server reads. Only `account create` does so, saying where; anything else is refused.
 */
function newStoreCheck(command: string, dir: string, flags: OpArgs): void {
  if (embeddedStoreExists(dir)) return;
  const reach = 'A server started with --config FILE or --data-dir DIR keeps its store there: pass the same flag to this command.';
  if (command !== 'account create') throw new OpError(`no Tollgate store in ${dir} (and no server running on it). ${reach}`, 1);
  process.stderr.write(`tollgate: no Tollgate store in ${dir}${typeof flags.data_dir === 'string' ? '' : ' (the default data dir)'}: creating a new embedded store there. ${reach}\n`);
}

async function withStore<T>(config: Config, dir: string, fn: (db: Db) => Promise<T>): Promise<T> {
  const unlock = config.databaseUrl ? () => undefined : lockDataDir(dir);
  let db: Db | undefined;
  try {
    db = config.databaseUrl ? await openPostgres(config.databaseUrl, 2) : await openPglite(dir);
    return await fn(db);
  } finally {
    await db?.close();
    unlock();
  }
}

function human(o: Record<string, unknown>, indent = ''): string {
  return Object.entries(o).map(([k, v]) => {
    if (Array.isArray(v)) return `${indent}${k}:${v.length ? '' : ' (none)'}\n${v.map((x) => (typeof x === 'object' && x ? `${human(x as Record<string, unknown>, `${indent}    `).replace(/^\s+/, `${indent}  - `)}` : `${indent}  - ${String(x)}`)).join('\n')}`;
    return `${indent}${k}: ${v === null ? '-' : String(v)}`;
  }).join('\n');
}

async function main(): Promise<void> {
  const { positional, flags } = parseArgs(process.argv.slice(2));
  const [cmd, sub, ...rest] = positional;
  if (!cmd || flags.help) { process.stdout.write(`${USAGE}\n`); process.exit(cmd ? 0 : 2); }
  if (cmd === 'serve') return serve(flags);
  if (cmd === 'sim') return simCommand(flags);
  if ((cmd === 'account' || cmd === 'key') && sub) return operator(`${cmd} ${sub}`, rest, flags);
  throw new OpError(`unknown command "${positional.join(' ')}"\n${USAGE}`);
}

main().catch((e: unknown) => {
  if (e instanceof OpError || e instanceof ConfigError || e instanceof DataDirBusy) {
    process.stderr.write(`tollgate: ${e.message}\n`);
    process.exit(e instanceof OpError ? e.exitCode : 2);
  }
  process.stderr.write(`tollgate: ${(e as Error)?.stack ?? String(e)}\n`);
  process.exit(1);
});

// The operator's first hour: what the first start prints, the demo account in the console, and the CLI reaching every account
// (every gw.cli here starts the real CLI process: its exit codes and messages are what is tested).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGateway, bearer, chatBody, CLI, ROOT } from './helpers/gateway.mjs';
import { ConsoleClient } from './browser/client.mjs';

const run = promisify(execFile);
const env = () => { const e = { ...process.env }; delete e.TOLLGATE_DATA_DIR; return e; };

/** Runs a command exactly as a banner printed it (from the directory the server was started in). */
async function asPrinted(line) {
  const words = line.trim().split(/\s+/);
  assert.equal(words[0], 'node', line);
  return run(process.execPath, words.slice(1), { cwd: ROOT, env: env() });
}

/** The command a banner line suggests: the text after its label, up to a parenthesised note. */
function command(stdout, label) {
  const line = stdout.split('\n').find((l) => l.trimStart().startsWith(label));
  assert.ok(line, `the banner has a "${label}" line:\n${stdout}`);
  return line.slice(line.indexOf(label) + label.length).replace(/\(.*\)\s*$/, '').trim();
}

/** Signs in with a one-time link: its page, then its button. */
async function signIn(browser, url) {
  const path = new URL(url).pathname;
  const page = await browser.request(path);
  assert.equal(page.status, 200, page.text);
  assert.match(page.text, /Sign in as demo@tollgate\.local/);
  return browser.post(path);
}

test('the first start prints a key, a one-time console sign-in link and a command for more keys that works as printed; so do later starts', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-first-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const gw = await startGateway(t, { embedded: true, dataDir: dir, spawnCli: true });
  const out = gw.output.stdout;
  const link = command(out, 'Console sign-in:');
  assert.match(link, /^http:\/\/127\.0\.0\.1:\d+\/console\/signin\/[A-Za-z0-9_-]{43}$/);
  const more = command(out, 'More keys:');
  assert.match(more, new RegExp(`^node dist/cli\\.js key create --account acct_\\w+ --data-dir ${dir}$`));
  const made = await asPrinted(more);
  const key = /key: (svc_live_\w+)/.exec(made.stdout)?.[1];
  assert.ok(key, made.stdout);
  assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() })).status, 200);
  await gw.stop();

  const again = await startGateway(t, { embedded: true, dataDir: dir, spawnCli: true });
  const later = again.output.stdout;
  assert.doesNotMatch(later, /shown once/);
  const keys = command(later, 'API keys:');
  assert.match(keys, /^node dist\/cli\.js key create --account acct_\w+ --data-dir /);
  assert.match((await asPrinted(keys)).stdout, /key: svc_live_/);
  const printed = (await asPrinted(command(later, 'Console sign-in:'))).stdout;
  const link2 = /url: (http\S+)/.exec(printed)?.[1];
  assert.ok(link2, printed);
  // Links from any start sign in as the demo account (on this server's address), once each.
  const browser = new ConsoleClient(again.url);
  const first = await signIn(browser, `${again.url}${new URL(link).pathname}`);
  assert.equal(first.status, 303);
  assert.equal(first.headers.location, '/console/account?done=link');
  const account = await browser.request('/console/account?done=link');
  assert.match(account.text, /Set a password/);
  assert.match(account.text, /demo@tollgate\.local/);
  const usage = await browser.request('/console/usage');
  assert.equal(usage.status, 200, 'the demo account sees its usage');
  assert.equal((await browser.request(new URL(link).pathname)).status, 410, 'a link signs in once');
  const set = await browser.post('/console/account/password', { password: 'violet tugboat harmonica' }, '/console/account');
  assert.equal(set.status, 303);
  const other = new ConsoleClient(again.url);
  assert.equal((await other.login('demo@tollgate.local', 'violet tugboat harmonica')).status, 303, 'the password set there logs in');
  assert.equal((await signIn(new ConsoleClient(again.url), `${again.url}${new URL(link2).pathname}`)).status, 303);
  await again.stop();
  const third = await startGateway(t, { embedded: true, dataDir: dir, spawnCli: true });
  assert.match(third.output.stdout, /Console log-in:\s+demo@tollgate\.local with the password set for it/);
});

test('the operator reaches every account by id or email, and an unknown one is exit 1 with a clear message', async (t) => {
  const gw = await startGateway(t, { store: 'postgres', spawnCli: true });
  const a = await gw.cli('account', 'create', '--email', 'Alice@Example.com', '--credit', '3');
  const b = await gw.cli('account', 'create', '--email', 'bob@example.org');
  const all = await gw.cli('account', 'list');
  assert.deepEqual(all.accounts.map((x) => x.email), ['Alice@Example.com', 'bob@example.org']);
  assert.deepEqual(all.accounts[0], { account_id: a.account_id, email: 'Alice@Example.com', balance: 3, keys: 0, created_at: all.accounts[0].created_at });
  assert.deepEqual((await gw.cli('account', 'list', '--email', 'example.ORG')).accounts.map((x) => x.account_id), [b.account_id]);
  assert.equal((await gw.cli('account', 'show', 'alice@example.com')).account_id, a.account_id, 'an email in any case');
  assert.equal((await gw.cli('account', 'show', a.account_id)).email, 'Alice@Example.com');
  const k = await gw.cli('key', 'create', '--account', 'bob@example.org');
  assert.equal(k.account_id, b.account_id);
  assert.equal((await gw.cli('key', 'list', '--account', 'bob@example.org')).keys.length, 1);
  await gw.cli('account', 'credit', 'bob@example.org', '--amount', '1');

  for (const args of [['key', 'list', '--account', 'nope'], ['account', 'show', 'nobody@example.com'], ['key', 'create', '--account', 'acct_nope'],
    ['account', 'credit', 'nope', '--amount', '1'], ['key', 'revoke', 'svc_live_xyz'], ['key', 'revoke', `svc_live_${'x'.repeat(40)}`]]) {
    const err = await gw.cli(...args).then(() => null, (e) => e);
    assert.ok(err, `${args.join(' ')} failed`);
    assert.equal(err.code, 1, args.join(' '));
    assert.match(err.stderr, /^tollgate: no (account|key)/, args.join(' '));
    assert.doesNotMatch(err.stderr, /x{20}/, 'a key is never echoed whole');
  }
  const usage = await gw.cli('key', 'create').then(() => null, (e) => e);
  assert.equal(usage.code, 2, 'a missing flag is a usage error');

  // The full key revokes it as well as its prefix does.
  assert.equal((await gw.fetch('/svc/v1/key', { headers: bearer(k.key) })).status, 200);
  assert.ok((await gw.cli('key', 'revoke', k.key)).revoked_at);
  const deadline = Date.now() + 3000;
  while ((await gw.fetch('/svc/v1/key', { headers: bearer(k.key) })).status !== 401) {
    assert.ok(Date.now() < deadline, 'the revoked key is refused within seconds');
    await new Promise((r) => setTimeout(r, 100));
  }
});

test('the serve --config banner suggests commands with --config, and they work as printed', async (t) => {
  const gw = await startGateway(t, { store: 'postgres', spawnCli: true });
  await gw.cli('account', 'create', '--email', 'listed@example.com');
  const list = command(gw.output.stdout, 'Accounts:');
  assert.equal(list, `node dist/cli.js account list --config ${gw.configPath}`);
  const { stdout } = await run(process.execPath, [...list.split(/\s+/).slice(1)], { cwd: ROOT, env: { ...env(), TOLLGATE_TEST_DATABASE_URL: gw.db.url } });
  assert.match(stdout, /listed@example\.com/);
  assert.match(gw.output.stdout, new RegExp(`key create --account ACCOUNT --config ${gw.configPath}`));
});

test('a CLI run that would make a new embedded store says where it writes, and one that only reads is refused', async (t) => {
  const cwd = mkdtempSync(join(tmpdir(), 'tollgate-cwd-'));
  t.after(() => rmSync(cwd, { recursive: true, force: true }));
  const read = await run(process.execPath, [CLI, 'key', 'list', '--account', 'acct_x'], { cwd, env: env() }).then(() => null, (e) => e);
  assert.equal(read.code, 1);
  assert.match(read.stderr, new RegExp(`no Tollgate store in ${join(cwd, 'tollgate-data')} \\(and no server running on it\\)\\. A server started with --config FILE or --data-dir DIR`));
  assert.ok(!existsSync(join(cwd, 'tollgate-data', 'pg')), 'reading made no store');
  const made = await run(process.execPath, [CLI, 'account', 'create', '--email', 'new@example.com', '--json'], { cwd, env: env() });
  assert.match(made.stderr, new RegExp(`no Tollgate store in ${join(cwd, 'tollgate-data')} \\(the default data dir\\): creating a new embedded store there`));
  assert.equal(JSON.parse(made.stdout).email, 'new@example.com', 'stdout stays one JSON object');
  const quiet = await run(process.execPath, [CLI, 'account', 'list', '--json'], { cwd, env: env() });
  assert.equal(quiet.stderr, '', 'an existing store is used without a word');
});

test('the banner prints both families\' base URLs with the header each takes, and the ElevenLabs one answers with the printed key', async (t) => {
  const gw = await startGateway(t, { embedded: true, spawnCli: true });
  const out = gw.output.stdout;
  const line = out.split('\n').find((l) => l.trimStart().startsWith('ElevenLabs-shaped API:'));
  assert.ok(line, out);
  const m = /^\s*ElevenLabs-shaped API:\s+(http:\/\/127\.0\.0\.1:\d+\/beta)\s+\(key in the xi-api-key header\)$/.exec(line);
  assert.ok(m, line);
  assert.match(out, /OpenAI-shaped API:\s+http:\/\/127\.0\.0\.1:\d+\/v1 .*Authorization: Bearer/);
  const key = /API key \(shown once\):\s+(svc_live_\w+)/.exec(out)?.[1];
  assert.ok(key, out);
  const r = await fetch(`${m[1]}/v1/models`, { headers: { 'xi-api-key': key } });
  assert.equal(r.status, 200);
  assert.ok(Array.isArray(await r.json()));
});

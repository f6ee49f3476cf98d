// The process contract: embedded first start, CLI beside a running server, SIGTERM drain, config validation.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { startGateway, freshDatabase, bearer, chatBody, CLI, TEST_MODELS, assertInvariants, priceNano, dollarsToNano } from './helpers/gateway.mjs';

const run = promisify(execFile);

test('the embedded default creates its store and a demo account on first start (initdb, not the template the tests copy), prints a working key, and keeps data across restarts', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-embedded-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const gw = await startGateway(t, { embedded: true, dataDir: dir, freshStore: true });
  const key = /API key \(shown once\):\s+(svc_live_[0-9A-Za-z]+)/.exec(gw.output.stdout)?.[1];
  assert.ok(key, `banner shows a key:\n${gw.output.stdout}`);
  assert.match(gw.output.stdout, /Console:\s+http:\/\/127\.0\.0\.1:\d+\/console/);
  const me = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
  assert.equal(me.balance, 10);
  // operator CLI works while serve owns the embedded store
  const acct = await gw.cli('account', 'create', '--email', 'second@example.com', '--credit', '2.5');
  const k2 = await gw.cli('key', 'create', '--account', acct.account_id, '--scopes', 'llm');
  assert.match(k2.key, /^svc_live_[0-9A-Za-z]{32,}$/);
  assert.equal(k2.prefix, k2.key.slice(0, 12));
  const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(k2.key), body: chatBody() });
  assert.equal(res.status, 200);
  const { usage } = await res.json();
  await gw.cli('account', 'credit', acct.account_id, '--amount', '1');
  const deadline = Date.now() + 1000;
  let bal;
  do {
    bal = (await (await gw.fetch('/svc/v1/key', { headers: bearer(k2.key) })).json()).balance;
    if (dollarsToNano(bal) === dollarsToNano('3.5') - priceNano(usage.prompt_tokens, usage.completion_tokens)) break;
    await new Promise((r) => setTimeout(r, 50));
  } while (Date.now() < deadline);
  assert.equal(dollarsToNano(bal), dollarsToNano('3.5') - priceNano(usage.prompt_tokens, usage.completion_tokens));
  await assertInvariants(assert, gw, acct.account_id);
  await gw.stop();
  // with serve stopped, the CLI opens the store itself
  const { stdout } = await run(process.execPath, [CLI, 'account', 'show', acct.account_id, '--json', '--data-dir', dir]);
  assert.equal(JSON.parse(stdout).keys.length, 1);
  const again = await startGateway(t, { embedded: true, dataDir: dir });
  assert.doesNotMatch(again.output.stdout, /shown once/);
  assert.equal((await again.fetch('/svc/v1/key', { headers: bearer(k2.key) })).status, 200);
});

test('SIGTERM stops accepting, lets the in-flight stream finish and settles its debit before exit', async (t) => {
  const db = await freshDatabase();
  t.after(() => db.drop());
  const gw = await startGateway(t, { database: db });
  const { key, account } = await gw.account('5');
  const res = await gw.fetch('/v1/chat/completions', {
    method: 'POST', headers: { ...bearer(key), 'x-sim-token-delay-ms': '25' },
    body: chatBody({ stream: true, stream_options: { include_usage: true } }),
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const first = await reader.read();
  assert.ok(!first.done);
  gw.proc.kill('SIGTERM');
  let text = Buffer.from(first.value).toString();
  for (;;) { const { done, value } = await reader.read(); if (done) break; text += Buffer.from(value).toString(); }
  assert.match(text, /data: \[DONE\]/);
  const usage = JSON.parse(text.split('\n\n').filter((e) => e.includes('"usage":{')).at(-1).slice(6)).usage;
  const { code } = await gw.exited;
  assert.equal(code, 0);
  await assert.rejects(fetch(`${gw.url}/health`));
  const show = await gw.cli('account', 'show', account);
  assert.equal(dollarsToNano(show.balance), dollarsToNano('5') - priceNano(usage.prompt_tokens, usage.completion_tokens));
  assert.equal(show.balance, show.ledger_total);
});

test('a config file with a bad field fails at start-up naming the field', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-cfg-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const cases = [
    [{ upstreams: { sim: { sim: {} } }, models: TEST_MODELS, limits: { default_rpm: 'many' } }, /\/limits\/default_rpm/],
    [{ upstreams: { sim: { sim: {} } }, models: [{ ...TEST_MODELS[0], upstream: 'vllm' }] }, /\/models\/0\/upstream: no upstream named "vllm"/],
    [{ upstreams: { sim: { sim: {} } }, models: TEST_MODELS, database: { url_env: 'TOLLGATE_NOT_SET_ANYWHERE' } }, /\/database\/url_env: environment variable TOLLGATE_NOT_SET_ANYWHERE is not set/],
    [{ upstreams: { sim: { base_url: 'ftp://x' } }, models: TEST_MODELS }, /\/upstreams\/sim\/base_url/],
    [{ upstreams: { sim: { sim: {} } }, models: TEST_MODELS, colour: 'blue' }, /colour|\/: /],
  ];
  for (const [config, pattern] of cases) {
    const path = join(dir, 'bad.json');
    writeFileSync(path, JSON.stringify(config));
    const err = await run(process.execPath, [CLI, 'serve', '--config', path, '--data-dir', dir]).then(() => null, (e) => e);
    assert.ok(err, 'serve refused to start');
    assert.equal(err.code, 2);
    assert.match(err.stderr, pattern);
  }
});

test('the example config in config/ is valid', async () => {
  const { loadConfigFile } = await import('../dist/config.js');
  const c = loadConfigFile(new URL('../config/example.json', import.meta.url).pathname, { TOLLGATE_DATABASE_URL: 'postgres://x', TOLLGATE_REDIS_URL: 'redis://x', VLLM_API_KEY: 'k',
    STRIPE_SECRET_KEY: 'sk_test_x', STRIPE_WEBHOOK_SECRET: 'whsec_x' });
  assert.ok(c.models.length > 0);
});

test('an operator credit moves the balance and records its reason in the ledger', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const acct = await gw.cli('account', 'create', '--email', 'credited@example.com');
  const out = await gw.cli('account', 'credit', acct.account_id, '--amount', '12.345', '--reason', 'goodwill for incident #42');
  assert.equal(out.credited, 12.345);
  assert.equal(out.balance, 12.345);
  const db = new pg.Client({ connectionString: gw.db.url });
  await db.connect();
  // As text: the gateway modules this process loads for gw.cli read int8 as bigint in every pg client here.
  const { rows } = await db.query("SELECT kind, amount_nd::text AS amount_nd, reason FROM ledger WHERE account_id = $1", [acct.account_id]);
  await db.end();
  assert.deepEqual(rows, [{ kind: 'credit', amount_nd: '12345000000', reason: 'goodwill for incident #42' }]);
  await assertInvariants(assert, gw, acct.account_id);
});

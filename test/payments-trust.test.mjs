// Payments against hostile input: a config file names its provider (the sandbox only when flagged, and
// then it says so), return URLs stay on allowed origins, and only charges Tollgate made and recorded credit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import Stripe from 'stripe';
import { startGateway, bearer, chatBody, assertInvariants, dollarsToNano, CLI, TEST_MODELS } from './helpers/gateway.mjs';
import { ConsoleClient } from './browser/client.mjs';

/** Runs `serve` on a config that should be refused; gives up (and kills it) after 15 s if it starts instead. */
function serveRefused(t, config) {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-pay-cfg-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'config.json');
  writeFileSync(path, JSON.stringify(config));
  return spawnSync(process.execPath, [CLI, 'serve', '--config', path, '--data-dir', dir, '--listen', '127.0.0.1:0'],
    { encoding: 'utf8', timeout: 15_000, env: { ...process.env, TOLLGATE_LOG_REQUESTS: '0' } });
}

// ---- the provider is named in a config file ------------------------------------------------------------

test('a config file that does not name its payment provider, or names the sandbox without allow_sandbox, is refused at start-up', (t) => {
  const base = { listen: '127.0.0.1:0', upstreams: { sim: { sim: {} } }, models: TEST_MODELS };
  for (const [payments, pattern] of [
    [undefined, /\/payments\/provider: a config file must name its payment provider/],
    [{ currency: 'usd' }, /\/payments\/provider: a config file must name its payment provider/],
    [{ provider: 'sandbox' }, /\/payments\/allow_sandbox: .*no real money/],
    [{ provider: 'sandbox', allow_sandbox: false }, /\/payments\/allow_sandbox: .*no real money/],
  ]) {
    const r = serveRefused(t, { ...base, ...(payments ? { payments } : {}) });
    assert.doesNotMatch(r.stdout, /"msg":"listening"/, `${JSON.stringify(payments)}: the gateway must not start`);
    assert.equal(r.status, 2, `${JSON.stringify(payments)}: serve refused to start (it exited with ${r.status}, signal ${r.signal})`);
    assert.match(r.stderr, pattern, JSON.stringify(payments));
  }
});

test('a config file running the sandbox logs a warning at start and its checkout pages say no real money is taken', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const warning = gw.output.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
    .find((j) => j.level === 'warn' && /sandbox/.test(j.msg));
  assert.ok(warning, `a warning line at start:\n${gw.output.stdout}`);
  assert.match(warning.msg, /no real money/);

  const c = new ConsoleClient(gw.url);
  await c.signup(`p${randomBytes(5).toString('hex')}@example.com`);
  const billing = await c.request('/console/billing');
  assert.equal(billing.status, 200);
  assert.match(billing.text, /<div class="notice warn" role="status">[^<]*sandbox[^<]*no real money is taken/);
  const topup = await c.post('/console/billing/topup', { amount: '10' }, '/console/billing');
  assert.equal(topup.status, 303);
  const page = await c.request(new URL(topup.headers.location).pathname);
  assert.equal(page.status, 200);
  assert.match(page.text, /<div class="banner" role="note">Sandbox — no real charge\. No real money is taken/);
});

// ---- return URLs ---------------------------------------------------------------------------------------

/** POSTs a checkout (or, for `card`, a card-saving session) with this return_url; → [status, body]. */
async function withReturn(gw, key, kind, url) {
  const body = JSON.stringify({ ...(kind === 'checkout' ? { amount: 10 } : {}), return_url: url });
  const res = await gw.fetch(`/svc/v1/billing/${kind}`, { method: 'POST', headers: bearer(key), body });
  return [res.status, await res.json()];
}

test('checkout and card return_url must lead to the gateway’s own origin or one listed in payments.return_origins', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('1');
  const own = new URL(gw.url);
  const foreign = ['https://evil.example.com/paid', 'http://evil.example.com', `http://${own.hostname}.evil.example.com:${own.port}/x`,
    `http://evil.example.com@${own.host}.evil.example.com/`, `https://${own.host}/console`, `http://${own.hostname}:1/console`];
  for (const kind of ['checkout', 'card']) {
    for (const url of foreign) {
      const [status, body] = await withReturn(gw, key, kind, url);
      assert.equal(status, 422, `${kind} ${url}`);
      assert.equal(body.error.param, 'return_url', `${kind} ${url}`);
      assert.match(body.error.message, /return_url.*origin/);
    }
    const [status, body] = await withReturn(gw, key, kind, `${gw.url}/console/billing?from=app`);
    assert.equal(status, 200, `${kind} back to the gateway itself`);
    assert.match(body.session_id, /^cs_sandbox_/);
  }

  // With public_url, that origin is the gateway's own (not the address a request came in on); a list adds others.
  const listed = await startGateway(t, { store: 'pglite', publicUrl: 'https://gateway.example.com',
    payments: { provider: 'sandbox', allow_sandbox: true, return_origins: ['https://app.example.com', 'http://localhost:3000/'] } });
  const k2 = (await listed.account('1')).key;
  for (const url of ['https://app.example.com/paid#top', 'http://localhost:3000/x', 'https://gateway.example.com/console/billing']) {
    assert.equal((await withReturn(listed, k2, 'checkout', url))[0], 200, url);
    assert.equal((await withReturn(listed, k2, 'card', url))[0], 200, url);
  }
  for (const url of [`${listed.url}/console/billing`, 'http://app.example.com/paid', 'https://app.example.com.evil.example.com/', 'https://localhost:3000/x']) {
    assert.equal((await withReturn(listed, k2, 'checkout', url))[0], 422, url);
  }
});

test('payments.return_origins must list origins only', (t) => {
  const base = { listen: '127.0.0.1:0', upstreams: { sim: { sim: {} } }, models: TEST_MODELS };
  const r = serveRefused(t, { ...base, payments: { provider: 'sandbox', allow_sandbox: true, return_origins: ['https://app.example.com/paid'] } });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /\/payments\/return_origins\/0: must be an origin/);
});

// ---- only payments Tollgate asked for credit -----------------------------------------------------------

const WEBHOOK_SECRET = `whsec_test_${randomBytes(12).toString('hex')}`;
const signer = new Stripe('sk_test_signing_only');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A sandbox gateway whose webhook secret the test knows, so it can sign events as the provider would. */
function signingGateway(t) {
  return startGateway(t, { store: 'postgres', env: { TG_TEST_WEBHOOK_SECRET: WEBHOOK_SECRET },
    payments: { provider: 'sandbox', allow_sandbox: true, webhook_secret_env: 'TG_TEST_WEBHOOK_SECRET' } });
}

/** Posts a correctly signed event; → the outcome the webhook reports. */
async function deliver(gw, event) {
  const payload = JSON.stringify({ id: `evt_${randomBytes(8).toString('hex')}`, object: 'event', created: Math.floor(Date.now() / 1000), ...event });
  const res = await gw.fetch('/svc/v1/billing/webhook', { method: 'POST', body: payload,
    headers: { 'content-type': 'application/json', 'stripe-signature': signer.webhooks.generateTestHeaderString({ payload, secret: WEBHOOK_SECRET }) } });
  assert.equal(res.status, 200);
  return (await res.json()).outcome;
}

function paymentSucceeded(account, { id = `pi_${randomBytes(8).toString('hex')}`, cents = 50_000, currency = 'usd', attempt = '1' } = {}) {
  return { type: 'payment_intent.succeeded', data: { object: { id, object: 'payment_intent', status: 'succeeded', amount: cents, amount_received: cents,
    currency, metadata: { account_id: account, tollgate: 'auto_topup', ...(attempt === null ? {} : { attempt }) } } } };
}

async function balanceOf(gw, key) {
  return dollarsToNano(String((await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json()).balance));
}

test('a signed payment_intent.succeeded with Tollgate’s metadata credits only the saved-card charge Tollgate made and recorded', async (t) => {
  const gw = await signingGateway(t);
  const c = new ConsoleClient(gw.url);
  await c.signup(`p${randomBytes(5).toString('hex')}@example.com`);
  const account = await c.accountId();
  const { key } = await c.createKey({ label: 'spender' });
  await gw.cli('account', 'credit', account, '--amount', '1');
  for (let i = 0; i < 40 && (await balanceOf(gw, key)) === 0n; i++) await sleep(50);

  // No charge was ever made: $500 "auto top-ups", with or without an attempt number, credit nothing.
  assert.notEqual(await deliver(gw, paymentSucceeded(account)), 'credited');
  assert.notEqual(await deliver(gw, paymentSucceeded(account, { attempt: null })), 'credited');
  assert.equal(await balanceOf(gw, key), dollarsToNano('1'));

  // A real one: save a card on the sandbox, arm auto top-up above the balance, spend.
  const card = await c.post('/console/billing/card', {}, '/console/billing');
  const saved = await c.request(new URL(card.headers.location).pathname, { method: 'POST', form: { card_number: '4242424242424242' } });
  assert.equal(saved.status, 303);
  assert.equal((await c.post('/console/billing/auto-topup', { enabled: 'on', threshold: '2', amount: '15' }, '/console/billing')).status, 303);
  const chat = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() });
  assert.equal(chat.status, 200);
  await chat.arrayBuffer();
  for (let i = 0; i < 100 && !/data-status="succeeded"/.test((await c.request('/console/billing')).text); i++) await sleep(100);
  const credited = await balanceOf(gw, key);
  assert.ok(credited > dollarsToNano('15'), 'the charge Tollgate made was credited');

  // The same attempt again under another payment intent, the next attempt (not charged yet), another currency.
  for (const forged of [{ attempt: '1', cents: 1500 }, { attempt: '2', cents: 1500 }, { attempt: '2', cents: 1500, currency: 'eur' }, { attempt: '1', cents: 50_000 }]) {
    assert.notEqual(await deliver(gw, paymentSucceeded(account, forged)), 'credited', JSON.stringify(forged));
  }
  assert.equal(await balanceOf(gw, key), credited, 'nothing more was credited');
  await assertInvariants(assert, gw, account);
});

test('a signed checkout event credits only the amount and currency its session asked for', async (t) => {
  const gw = await signingGateway(t);
  const { account, key } = await gw.account('1');
  const res = await gw.fetch('/svc/v1/billing/checkout', { method: 'POST', headers: bearer(key), body: JSON.stringify({ amount: 10 }) });
  const { session_id: id } = await res.json();
  const completed = (extra) => ({ type: 'checkout.session.completed', data: { object: { id, object: 'checkout.session', mode: 'payment',
    payment_status: 'paid', amount_total: 1000, currency: 'usd', client_reference_id: account, metadata: { account_id: account }, ...extra } } });
  for (const extra of [{ amount_total: 50_000 }, { amount_total: 999 }, { currency: 'eur' }, { amount_total: undefined }, { client_reference_id: 'acct_someone_else' }]) {
    assert.notEqual(await deliver(gw, completed(extra)), 'credited', JSON.stringify(extra));
  }
  assert.equal(await balanceOf(gw, key), dollarsToNano('1'));
  assert.equal(await deliver(gw, completed({})), 'credited');
  assert.equal(await balanceOf(gw, key), dollarsToNano('11'));
  await assertInvariants(assert, gw, account);
});

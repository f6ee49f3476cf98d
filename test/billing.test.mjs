// Prepaid card billing: webhook signatures and idempotent fulfilment, checkout bounds, the Stripe provider against a
// local stand-in for its API, the sandbox checkout end to end, saved cards and auto top-up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import Stripe from 'stripe';
import { startGateway, freshDatabase, assertInvariants, bearer, chatBody, dollarsToNano, CLI, TEST_MODELS } from './helpers/gateway.mjs';
import { getAutoTopup, setAutoTopup } from '../dist/billing/index.js';
import { openPostgres } from '../dist/store/db.js';

const run = promisify(execFile);
const WEBHOOK_SECRET = `whsec_test_${randomBytes(12).toString('hex')}`;
const STRIPE_KEY = `sk_test_${randomBytes(12).toString('hex')}`;
const stripe = new Stripe('sk_test_signing_only');

/** Signs like Stripe does (its own library), optionally at another time or with another secret. */
function sign(payload, { secret = WEBHOOK_SECRET, timestamp } = {}) {
  return stripe.webhooks.generateTestHeaderString({ payload, secret, ...(timestamp ? { timestamp } : {}) });
}

const nowSec = () => Math.floor(Date.now() / 1000);
const toNano = (dollars) => dollarsToNano(dollars.toFixed(9));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * startGateway's own options have no `payments` knob, so this starts `serve` the same way with a config
 * that adds one (a known webhook secret; for `stripe`, a secret key and the stand-in's base URL).
 */
async function startBilling(t, { provider = 'sandbox', apiBase, store = 'postgres' } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-billing-'));
  const env = { ...process.env, TOLLGATE_LOG_REQUESTS: '0', TG_TEST_WEBHOOK_SECRET: WEBHOOK_SECRET, TG_TEST_STRIPE_KEY: STRIPE_KEY };
  const config = {
    listen: '127.0.0.1:0', upstreams: { sim: { sim: {} } }, models: TEST_MODELS,
    payments: { provider, webhook_secret_env: 'TG_TEST_WEBHOOK_SECRET', ...(provider === 'stripe' ? { secret_key_env: 'TG_TEST_STRIPE_KEY' } : { allow_sandbox: true }),
      return_origins: ['https://app.example.com'], ...(apiBase ? { api_base: apiBase } : {}) },
  };
  const db = store === 'postgres' ? await freshDatabase() : null;
  if (db) {
    env.TOLLGATE_TEST_DATABASE_URL = db.url;
    config.database = { url_env: 'TOLLGATE_TEST_DATABASE_URL', pool_size: 8 };
  }
  const configPath = join(dir, 'config.json');
  writeFileSync(configPath, JSON.stringify(config, null, 2));
  const proc = spawn(process.execPath, [CLI, 'serve', '--data-dir', dir, '--listen', '127.0.0.1:0', '--config', configPath], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const output = { stdout: '', stderr: '' };
  proc.stderr.on('data', (d) => { output.stderr += d; });
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  const listening = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway did not start:\n${output.stdout}\n${output.stderr}`)), 30_000);
    proc.stdout.on('data', (d) => {
      output.stdout += d;
      const m = /^(\{.*"msg":"listening".*\})$/m.exec(output.stdout);
      if (m) { clearTimeout(timer); resolve(JSON.parse(m[1])); }
    });
    proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`gateway exited with ${code}:\n${output.stdout}\n${output.stderr}`)); });
  });
  const gw = {
    url: listening.base_url, db, output,
    fetch: (path, init = {}) => fetch(gw.url + path, init),
    async cli(...args) {
      const { stdout } = await run(process.execPath, [CLI, ...args, '--json', '--data-dir', dir, '--config', configPath], { env });
      return JSON.parse(stdout);
    },
    async account(credit = '10') {
      const acct = await gw.cli('account', 'create', '--email', `b${randomBytes(5).toString('hex')}@example.com`, '--credit', credit);
      const key = await gw.cli('key', 'create', '--account', acct.account_id);
      return { account: acct.account_id, key: key.key };
    },
  };
  t.after(async () => {
    if (proc.exitCode === null) proc.kill('SIGTERM');
    await Promise.race([exited, sleep(15_000)]);
    if (proc.exitCode === null) { proc.kill('SIGKILL'); await exited; }
    await db?.drop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });
  return gw;
}

/** A direct connection to the gateway's PostgreSQL database, for the exported billing functions and ledger reads. */
async function openStore(t, gw) {
  const db = await openPostgres(gw.db.url, 2);
  t.after(() => db.close());
  // setAutoTopup tells the Billing it was given to re-read its armed accounts; this process has none (the
  // gateway's own view refreshes within 2 s), so a no-op stands in for it.
  return { db, config: { payments: { provider: 'sandbox' } }, billing: { auto: { invalidate() {} } }, query: (sql, p) => db.query(sql, p) };
}

async function balance(gw, key) {
  const res = await gw.fetch('/svc/v1/key', { headers: bearer(key) });
  assert.equal(res.status, 200);
  return toNano((await res.json()).balance);
}

function postEvent(gw, payload, signature) {
  return gw.fetch('/svc/v1/billing/webhook', { method: 'POST', headers: { 'content-type': 'application/json', ...(signature ? { 'stripe-signature': signature } : {}) }, body: payload });
}

function checkoutEvent(type, sessionId, account, cents, extra = {}) {
  return JSON.stringify({
    id: `evt_${randomBytes(8).toString('hex')}`, object: 'event', type, created: nowSec(),
    data: { object: { id: sessionId, object: 'checkout.session', mode: 'payment', payment_status: 'paid', amount_total: cents, currency: 'usd',
      client_reference_id: account, metadata: { account_id: account }, ...extra } },
  });
}

async function checkout(gw, key, amount, extra = {}) {
  const res = await gw.fetch('/svc/v1/billing/checkout', { method: 'POST', headers: bearer(key), body: JSON.stringify({ amount, ...extra }) });
  return { status: res.status, body: await res.json() };
}

async function ledgerCredits(s, account, prefix) {
  const r = await s.query(`SELECT count(*)::int AS n, coalesce(sum(amount_nd), 0)::text AS total FROM ledger WHERE account_id = $1 AND idem_key LIKE $2`, [account, `${prefix}%`]);
  return { n: r.rows[0].n, total: BigInt(r.rows[0].total) };
}

/** A local stand-in for Stripe's REST API: records every request (form body parsed) and answers like Stripe. */
async function stripeStandIn(t) {
  const calls = [];
  const replayed = new Map();
  let n = 0;
  const standIn = {
    calls,
    /** (form) => [status, body] for POST /v1/payment_intents */
    paymentIntent: (form) => [200, { id: `pi_test_${++n}`, object: 'payment_intent', status: 'succeeded', amount: Number(form.amount), currency: form.currency,
      customer: form.customer, payment_method: form.payment_method, metadata: metadataOf(form) }],
    of: (path) => calls.filter((c) => c.path === path),
  };
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const form = Object.fromEntries(new URLSearchParams(body));
      const url = new URL(req.url, 'http://x');
      calls.push({ method: req.method, path: url.pathname, headers: req.headers, form });
      const key = req.headers['idempotency-key'];
      const answer = (status, obj) => {
        if (key && req.method === 'POST') replayed.set(`${url.pathname} ${key}`, [status, obj]);
        res.writeHead(status, { 'content-type': 'application/json', 'request-id': `req_${n}` });
        res.end(JSON.stringify(obj));
      };
      if (key && replayed.has(`${url.pathname} ${key}`)) return answer(...replayed.get(`${url.pathname} ${key}`));
      if (standIn.broken) return answer(400, { error: { type: 'invalid_request_error', message: 'secret internals' } });
      if (req.method === 'POST' && url.pathname === '/v1/customers') return answer(200, { id: `cus_test_${++n}`, object: 'customer', email: form.email ?? null });
      if (req.method === 'POST' && url.pathname === '/v1/checkout/sessions') {
        const id = `cs_test_${++n}${randomBytes(4).toString('hex')}`;
        return answer(200, { id, object: 'checkout.session', mode: form.mode, status: 'open', url: `https://checkout.stripe.com/c/pay/${id}`,
          amount_total: form['line_items[0][price_data][unit_amount]'] ? Number(form['line_items[0][price_data][unit_amount]']) : null,
          currency: form.currency ?? form['line_items[0][price_data][currency]'], customer: form.customer ?? null, client_reference_id: form.client_reference_id, metadata: metadataOf(form) });
      }
      const si = /^\/v1\/setup_intents\/([^/]+)$/.exec(url.pathname);
      if (req.method === 'GET' && si) return answer(200, { id: si[1], object: 'setup_intent', status: 'succeeded', customer: standIn.customer ?? null, payment_method: 'pm_card_visa' });
      if (req.method === 'POST' && url.pathname === '/v1/payment_intents') return answer(...standIn.paymentIntent(form));
      answer(404, { error: { type: 'invalid_request_error', message: `Unrecognized request URL (${req.method}: ${url.pathname})` } });
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(r); }));
  standIn.url = `http://127.0.0.1:${server.address().port}`;
  return standIn;
}

function metadataOf(form) {
  const out = {};
  for (const [k, v] of Object.entries(form)) {
    const m = /^metadata\[(.+)\]$/.exec(k);
    if (m) out[m[1]] = v;
  }
  return out;
}

async function until(what, fn, timeoutMs = 10_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

// ---- webhook signatures -------------------------------------------------------------------------------

test('a webhook signed with the configured secret credits its checkout and other signatures are refused with 400', async (t) => {
  const gw = await startBilling(t);
  const { account, key } = await gw.account('1');
  const { body: session } = await checkout(gw, key, 10);
  const before = await balance(gw, key);

  for (const [why, sig] of [
    ['another secret', (p) => sign(p, { secret: 'whsec_not_the_one' })],
    ['a mangled signature', (p) => sign(p).replace(/v1=([0-9a-f])/, (_, c) => `v1=${c === '0' ? '1' : '0'}`)],
    ['no v1 value', () => `t=${nowSec()}`],
    ['no header', () => null],
  ]) {
    const payload = checkoutEvent('checkout.session.completed', session.session_id, account, 1000);
    const res = await postEvent(gw, payload, sig(payload));
    assert.equal(res.status, 400, why);
    const err = await res.json();
    assert.equal(err.error.code, 'invalid_signature', why);
    assert.equal(err.error.type, 'invalid_request_error');
  }
  const tampered = checkoutEvent('checkout.session.completed', session.session_id, account, 1000);
  const res0 = await postEvent(gw, tampered.replace('"amount_total":1000', '"amount_total":100000'), sign(tampered));
  assert.equal(res0.status, 400, 'a body changed after signing is refused');
  assert.equal(await balance(gw, key), before, 'nothing credited by a refused event');

  const payload = checkoutEvent('checkout.session.completed', session.session_id, account, 1000);
  const ok = await postEvent(gw, payload, sign(payload));
  assert.equal(ok.status, 200);
  assert.deepEqual(await ok.json(), { received: true, outcome: 'credited' });
  assert.equal(await balance(gw, key), before + dollarsToNano('10'));
  await assertInvariants(assert, gw, account);
});

test('a webhook signed more than 300 seconds ago is refused and credits nothing', async (t) => {
  const gw = await startBilling(t);
  const { account, key } = await gw.account('1');
  const { body: session } = await checkout(gw, key, 25);
  const payload = checkoutEvent('checkout.session.completed', session.session_id, account, 2500);
  for (const timestamp of [nowSec() - 301, nowSec() - 3600, nowSec() + 3600]) {
    const res = await postEvent(gw, payload, sign(payload, { timestamp }));
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.code, 'invalid_signature');
  }
  assert.equal(await balance(gw, key), dollarsToNano('1'));
  const fresh = await postEvent(gw, payload, sign(payload, { timestamp: nowSec() - 250 }));
  assert.equal(fresh.status, 200, 'within the tolerance it is accepted');
  assert.equal(await balance(gw, key), dollarsToNano('26'));
  await assertInvariants(assert, gw, account);
});

test('a signature header with several v1 values is accepted when one of them matches', async (t) => {
  const gw = await startBilling(t);
  const { account, key } = await gw.account('0');
  const { body: session } = await checkout(gw, key, 5);
  const payload = checkoutEvent('checkout.session.completed', session.session_id, account, 500);
  const good = sign(payload);
  const ts = /t=(\d+)/.exec(good)[1];
  const v1 = /v1=([0-9a-f]+)/.exec(good)[1];
  const stale = sign(payload, { secret: 'whsec_rolled_over' }).match(/v1=([0-9a-f]+)/)[1];
  const res = await postEvent(gw, payload, `t=${ts},v1=${stale},v0=deadbeef,v1=${v1}`);
  assert.equal(res.status, 200);
  assert.equal(await balance(gw, key), dollarsToNano('5'));
  const none = await postEvent(gw, payload, `t=${ts},v1=${stale},v1=${'0'.repeat(64)}`);
  assert.equal(none.status, 400, 'several values none of which matches');
  await assertInvariants(assert, gw, account);
});

// ---- idempotent fulfilment ----------------------------------------------------------------------------

test('the same event delivered 100 times credits the account once', async (t) => {
  const gw = await startBilling(t);
  const s = await openStore(t, gw);
  const { account, key } = await gw.account('2');
  const { body: session } = await checkout(gw, key, 42.5);
  const payload = checkoutEvent('checkout.session.completed', session.session_id, account, 4250);
  const sig = sign(payload);
  const first = await Promise.all(Array.from({ length: 50 }, () => postEvent(gw, payload, sig)));
  for (const res of first) assert.equal(res.status, 200);
  for (let i = 0; i < 50; i++) assert.equal((await postEvent(gw, payload, sig)).status, 200);
  assert.equal(await balance(gw, key), dollarsToNano('44.5'));
  assert.deepEqual(await ledgerCredits(s, account, 'checkout:'), { n: 1, total: dollarsToNano('42.5') });
  // The same payment under a new event id (Stripe resends as a new event, too) still credits once.
  const again = checkoutEvent('checkout.session.completed', session.session_id, account, 4250);
  assert.equal((await postEvent(gw, again, sign(again))).status, 200);
  assert.equal(await balance(gw, key), dollarsToNano('44.5'));
  await assertInvariants(assert, gw, account);
});

test('async_payment_succeeded before completed credits the checkout once', async (t) => {
  const gw = await startBilling(t);
  const s = await openStore(t, gw);
  const { account, key } = await gw.account('0');
  const { body: session } = await checkout(gw, key, 30);
  const succeeded = checkoutEvent('checkout.session.async_payment_succeeded', session.session_id, account, 3000);
  assert.deepEqual(await (await postEvent(gw, succeeded, sign(succeeded))).json(), { received: true, outcome: 'credited' });
  const completedUnpaid = checkoutEvent('checkout.session.completed', session.session_id, account, 3000, { payment_status: 'unpaid' });
  assert.equal((await postEvent(gw, completedUnpaid, sign(completedUnpaid))).status, 200);
  const completedPaid = checkoutEvent('checkout.session.completed', session.session_id, account, 3000);
  assert.equal((await postEvent(gw, completedPaid, sign(completedPaid))).status, 200);
  assert.equal(await balance(gw, key), dollarsToNano('30'));
  assert.deepEqual(await ledgerCredits(s, account, 'checkout:'), { n: 1, total: dollarsToNano('30') });
  const row = await s.query('SELECT status FROM billing_sessions WHERE id = $1', [session.session_id]);
  assert.equal(row.rows[0].status, 'paid', 'a paid session does not move back to awaiting payment');
  await assertInvariants(assert, gw, account);
});

test('async_payment_failed credits nothing', async (t) => {
  const gw = await startBilling(t);
  const s = await openStore(t, gw);
  const { account, key } = await gw.account('3');
  const { body: session } = await checkout(gw, key, 50);
  const completed = checkoutEvent('checkout.session.completed', session.session_id, account, 5000, { payment_status: 'unpaid' });
  assert.deepEqual(await (await postEvent(gw, completed, sign(completed))).json(), { received: true, outcome: 'awaiting_payment' });
  const failed = checkoutEvent('checkout.session.async_payment_failed', session.session_id, account, 5000, { payment_status: 'unpaid' });
  assert.deepEqual(await (await postEvent(gw, failed, sign(failed))).json(), { received: true, outcome: 'failed' });
  assert.equal(await balance(gw, key), dollarsToNano('3'));
  assert.deepEqual(await ledgerCredits(s, account, 'checkout:'), { n: 0, total: 0n });
  await assertInvariants(assert, gw, account);
});

test('unknown event types are acknowledged with 200 and ignored', async (t) => {
  const gw = await startBilling(t);
  const { account, key } = await gw.account('1');
  for (const type of ['customer.created', 'invoice.paid', 'charge.refunded', 'payment_intent.succeeded']) {
    const payload = JSON.stringify({ id: `evt_${randomBytes(6).toString('hex')}`, object: 'event', type, data: { object: { id: 'x_1', amount: 999_00, metadata: { account_id: account } } } });
    const res = await postEvent(gw, payload, sign(payload));
    assert.equal(res.status, 200, type);
    assert.deepEqual(await res.json(), { received: true, outcome: 'ignored' });
  }
  const malformed = JSON.stringify({ hello: 'world' });
  assert.equal((await postEvent(gw, malformed, sign(malformed))).status, 400, 'a signed body that is no event');
  assert.equal(await balance(gw, key), dollarsToNano('1'));
  await assertInvariants(assert, gw, account);
});

// ---- checkout -----------------------------------------------------------------------------------------

test('checkout accepts $5 to $1000 and refuses 4.99 and 1000.01 with 422 naming amount', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { account, key } = await gw.account('0');
  for (const amount of [4.99, 1000.01, 0, -5, '10', 12.345]) {
    const { status, body } = await checkout(gw, key, amount);
    assert.equal(status, 422, `amount ${amount}`);
    assert.equal(body.error.param, 'amount');
    assert.equal(body.error.code, 'validation_error');
    assert.deepEqual(body.detail[0].loc, ['body', 'amount']);
  }
  for (const amount of [5, 1000, 19.99]) {
    const { status, body } = await checkout(gw, key, amount);
    assert.equal(status, 200, `amount ${amount}`);
    assert.deepEqual(Object.keys(body).sort(), ['amount', 'session_id', 'url']);
    assert.equal(body.amount, amount);
    assert.match(body.session_id, /^cs_sandbox_/);
    assert.equal(body.url, `${gw.url}/svc/v1/billing/sandbox/checkout/${body.session_id}`);
  }
  assert.equal((await gw.fetch('/svc/v1/billing/checkout', { method: 'POST', body: '{"amount":10}' })).status, 401, 'needs a key');
  assert.equal((await gw.fetch('/svc/v1/billing/card', { method: 'POST' })).status, 401, 'needs a key');
  await assertInvariants(assert, gw, account);
});

// ---- the stripe provider ------------------------------------------------------------------------------

test('the stripe provider creates a Checkout session with the amount in cents and credits on the signed completed event', async (t) => {
  const api = await stripeStandIn(t);
  const gw = await startBilling(t, { provider: 'stripe', apiBase: api.url });
  const { account, key } = await gw.account('1');
  const { status, body } = await checkout(gw, key, 12.5);
  assert.equal(status, 200);
  const [call] = api.of('/v1/checkout/sessions');
  assert.equal(call.method, 'POST');
  assert.equal(call.headers.authorization, `Bearer ${STRIPE_KEY}`);
  assert.match(call.headers['content-type'], /^application\/x-www-form-urlencoded/);
  const f = call.form;
  assert.equal(f.mode, 'payment');
  assert.equal(f['line_items[0][price_data][currency]'], 'usd');
  assert.equal(f['line_items[0][price_data][unit_amount]'], '1250');
  assert.ok(f['line_items[0][price_data][product_data][name]']);
  assert.equal(f['line_items[0][quantity]'], '1');
  assert.equal(f.client_reference_id, account);
  assert.equal(f['metadata[account_id]'], account);
  assert.ok(f.success_url.includes('{CHECKOUT_SESSION_ID}'), f.success_url);
  assert.ok(f.cancel_url.startsWith('http'));
  assert.deepEqual(body, { url: `https://checkout.stripe.com/c/pay/${body.session_id}`, session_id: body.session_id, amount: 12.5 });

  const payload = checkoutEvent('checkout.session.completed', body.session_id, account, 1250);
  assert.equal((await postEvent(gw, payload, sign(payload, { secret: 'whsec_other' }))).status, 400);
  assert.equal((await postEvent(gw, payload, sign(payload, { timestamp: nowSec() - 301 }))).status, 400);
  for (let i = 0; i < 3; i++) assert.equal((await postEvent(gw, payload, sign(payload))).status, 200);
  assert.equal(await balance(gw, key), dollarsToNano('13.5'));

  const custom = await checkout(gw, key, 5, { return_url: 'https://app.example.com/paid#top' });
  assert.equal(custom.status, 200);
  assert.equal(api.of('/v1/checkout/sessions')[1].form.success_url, 'https://app.example.com/paid?session_id={CHECKOUT_SESSION_ID}#top');
  await assertInvariants(assert, gw, account);
});

test('a Stripe API error answers 502 without passing its words on', async (t) => {
  const api = await stripeStandIn(t);
  api.broken = true;
  const gw = await startBilling(t, { provider: 'stripe', apiBase: api.url });
  const { account, key } = await gw.account('1');
  const res = await gw.fetch('/svc/v1/billing/checkout', { method: 'POST', headers: bearer(key), body: '{"amount":10}' });
  assert.equal(res.status, 502);
  const err = await res.json();
  assert.equal(err.error.code, 'payment_provider_error');
  assert.doesNotMatch(JSON.stringify(err), /secret internals/);
  await assertInvariants(assert, gw, account);
});

// ---- sandbox end to end -------------------------------------------------------------------------------

test('the embedded sandbox checkout pays end to end over HTTP and the balance rises by exactly the amount', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const { account, key } = await gw.account('0.5');
  const { status, body } = await checkout(gw, key, 37.25);
  assert.equal(status, 200);
  const page = await gw.fetch(new URL(body.url).pathname);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  assert.match(page.headers.get('content-security-policy'), /default-src 'none'/);
  const html = await page.text();
  assert.match(html, /Sandbox — no real charge/);
  assert.match(html, /\$37\.25/);
  assert.match(html, /value="4242 4242 4242 4242"/);
  assert.match(html, /<button type="submit" id="submit">Pay \$37\.25<\/button>/);
  const action = /<form method="post" action="([^"]+)"/.exec(html)[1];
  assert.equal(action, new URL(body.url).pathname);

  const declined = await gw.fetch(action, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ card_number: '4000 0000 0000 0002', card_expiry: '12 / 34', card_cvc: '123' }) });
  assert.equal(declined.status, 402);
  assert.match(await declined.text(), /declined/);
  assert.equal(await balance(gw, key), dollarsToNano('0.5'));

  const form = new URLSearchParams({ email: 'x@example.com', card_number: '4242 4242 4242 4242', card_expiry: '12 / 34', card_cvc: '123', card_name: 'T' });
  const paid = await gw.fetch(action, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: form });
  assert.equal(paid.status, 303);
  assert.equal(paid.headers.get('location'), `${gw.url}/console/billing?paid=${body.session_id}`);
  assert.equal(await balance(gw, key), dollarsToNano('37.75'), 'credited before the redirect');
  const twice = await gw.fetch(action, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: form });
  assert.equal(twice.status, 303, 'paying again only redirects');
  assert.equal(await balance(gw, key), dollarsToNano('37.75'));
  assert.match(await (await gw.fetch(action)).text(), /This checkout is paid/);
  assert.equal((await gw.fetch('/svc/v1/billing/sandbox/checkout/cs_sandbox_unknown123')).status, 404);
  await assertInvariants(assert, gw, account);
});

test('the sandbox checkout page escapes what it shows and redirects to the return_url', async (t) => {
  const gw = await startBilling(t);
  const { account, key } = await gw.account('0');
  const evil = 'https://app.example.com/done?x="><script>alert(1)</script>&y=<b>';
  const { status, body } = await checkout(gw, key, 5, { return_url: evil });
  assert.equal(status, 200);
  const html = await (await gw.fetch(new URL(body.url).pathname)).text();
  assert.doesNotMatch(html, /<script|<b>/);
  assert.match(html, /&quot;&gt;&lt;script&gt;/);
  const paid = await gw.fetch(new URL(body.url).pathname, { method: 'POST', redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'card_number=4242424242424242' });
  assert.equal(paid.status, 303);
  assert.equal(paid.headers.get('location'), `${evil}&session_id=${body.session_id}`);
  assert.equal(await balance(gw, key), dollarsToNano('5'));
  await assertInvariants(assert, gw, account);
});

test('a sandbox setup session stores a card reference', async (t) => {
  const gw = await startBilling(t);
  const s = await openStore(t, gw);
  const { account, key } = await gw.account('1');
  assert.equal((await getAutoTopup(s, account)).card, null);
  const res = await gw.fetch('/svc/v1/billing/card', { method: 'POST', headers: { authorization: `Bearer ${key}` } });
  assert.equal(res.status, 200);
  const session = await res.json();
  assert.match(session.session_id, /^cs_sandbox_/);
  const html = await (await gw.fetch(new URL(session.url).pathname)).text();
  assert.match(html, /Save card/);
  assert.match(html, /Sandbox — no real charge/);
  const saved = await gw.fetch(new URL(session.url).pathname, { method: 'POST', redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'card_number=4242424242424242' });
  assert.equal(saved.status, 303);
  assert.equal(saved.headers.get('location'), `${gw.url}/console/billing?done=card`);
  assert.match((await getAutoTopup(s, account)).card, /^pm_sandbox_/);
  assert.equal(await balance(gw, key), dollarsToNano('1'), 'saving a card charges nothing');
  await assertInvariants(assert, gw, account);
});

// ---- auto top-up --------------------------------------------------------------------------------------

/** Saves a card through a Stripe setup session (stand-in + signed completed event), then sets auto top-up. */
async function stripeCard(gw, api, account, key) {
  const res = await gw.fetch('/svc/v1/billing/card', { method: 'POST', headers: { authorization: `Bearer ${key}` } });
  assert.equal(res.status, 200);
  const { session_id } = await res.json();
  const setup = api.of('/v1/checkout/sessions').at(-1).form;
  assert.equal(setup.mode, 'setup');
  assert.equal(setup.currency, 'usd');
  assert.match(setup.customer, /^cus_test_/);
  api.customer = setup.customer;
  const payload = JSON.stringify({ id: `evt_${randomBytes(6).toString('hex')}`, object: 'event', type: 'checkout.session.completed',
    data: { object: { id: session_id, object: 'checkout.session', mode: 'setup', status: 'complete', customer: setup.customer, setup_intent: 'seti_123',
      client_reference_id: account, metadata: { account_id: account } } } });
  assert.deepEqual(await (await postEvent(gw, payload, sign(payload))).json(), { received: true, outcome: 'card_saved' });
  return setup.customer;
}

async function spend(gw, key, n = 4) {
  const res = await Promise.all(Array.from({ length: n }, () => gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() })));
  for (const r of res) { assert.equal(r.status, 200); await r.arrayBuffer(); }
}

test('auto top-up charges the saved card once when the balance dips under the threshold and credits on payment_intent.succeeded', async (t) => {
  const api = await stripeStandIn(t);
  const gw = await startBilling(t, { provider: 'stripe', apiBase: api.url });
  const s = await openStore(t, gw);
  s.config.payments.provider = 'stripe';
  const { account, key } = await gw.account('1');
  const customer = await stripeCard(gw, api, account, key);
  assert.equal((await getAutoTopup(s, account)).card, 'pm_card_visa');
  // The payment intent the API creates is the one its webhook event names.
  const created = api.paymentIntent;
  api.paymentIntent = (form) => { const [status, body] = created(form); return [status, { ...body, id: 'pi_test_auto' }]; };
  await setAutoTopup(s, account, { enabled: true, threshold: '5', amount: '20' });
  assert.deepEqual(await getAutoTopup(s, account), { enabled: true, threshold: 5, amount: 20, status: null, card: 'pm_card_visa' });

  await spend(gw, key);
  const [charge] = await until('a payment intent', () => api.of('/v1/payment_intents').length > 0 && api.of('/v1/payment_intents'));
  await spend(gw, key);
  await sleep(300);
  assert.equal(api.of('/v1/payment_intents').length, 1, 'one dip, one charge');
  assert.equal(charge.form.off_session, 'true');
  assert.equal(charge.form.confirm, 'true');
  assert.equal(charge.form.amount, '2000');
  assert.equal(charge.form.currency, 'usd');
  assert.equal(charge.form.customer, customer);
  assert.equal(charge.form.payment_method, 'pm_card_visa');
  assert.equal(charge.form['metadata[account_id]'], account);
  assert.ok(charge.headers['idempotency-key'], 'sent with an Idempotency-Key');
  assert.equal((await getAutoTopup(s, account)).status, 'processing');

  const before = await balance(gw, key);
  const intent = { id: 'pi_test_auto', object: 'payment_intent', status: 'succeeded', amount: 2000, amount_received: 2000, currency: 'usd',
    customer, payment_method: 'pm_card_visa', metadata: Object.fromEntries(Object.entries(charge.form).filter(([k]) => k.startsWith('metadata[')).map(([k, v]) => [k.slice(9, -1), v])) };
  const payload = JSON.stringify({ id: 'evt_pi_succeeded_1', object: 'event', type: 'payment_intent.succeeded', data: { object: intent } });
  assert.deepEqual(await (await postEvent(gw, payload, sign(payload))).json(), { received: true, outcome: 'credited' });
  assert.equal((await postEvent(gw, payload, sign(payload))).status, 200);
  const resent = payload.replace('evt_pi_succeeded_1', 'evt_pi_succeeded_2');
  assert.equal((await postEvent(gw, resent, sign(resent))).status, 200);
  assert.equal(await balance(gw, key), before + dollarsToNano('20'), 'credited once, by exactly the amount');
  assert.deepEqual(await ledgerCredits(s, account, 'topup:'), { n: 1, total: dollarsToNano('20') });
  assert.equal((await getAutoTopup(s, account)).status, 'succeeded');
  await spend(gw, key);
  await sleep(300);
  assert.equal(api.of('/v1/payment_intents').length, 1, 'above the threshold again: no more charges');
  await assertInvariants(assert, gw, account);
});

test('an authentication_required decline stops auto top-up until the settings change, and getAutoTopup reports it', async (t) => {
  const api = await stripeStandIn(t);
  api.paymentIntent = () => [402, { error: { type: 'card_error', code: 'authentication_required', decline_code: 'authentication_required',
    message: 'Your card was declined. This transaction requires authentication.', payment_intent: { id: 'pi_test_sca', object: 'payment_intent', status: 'requires_payment_method' } } }];
  const gw = await startBilling(t, { provider: 'stripe', apiBase: api.url });
  const s = await openStore(t, gw);
  s.config.payments.provider = 'stripe';
  const { account, key } = await gw.account('1');
  await stripeCard(gw, api, account, key);
  await setAutoTopup(s, account, { enabled: true, threshold: '5', amount: '10' });

  await spend(gw, key);
  await until('the decline to be stored', async () => (await getAutoTopup(s, account)).status === 'authentication_required');
  assert.equal(api.of('/v1/payment_intents').length, 1);
  // The same decline also arrives as a webhook; it changes nothing more.
  const failed = JSON.stringify({ id: 'evt_pi_failed', object: 'event', type: 'payment_intent.payment_failed', data: { object: {
    id: 'pi_test_sca', object: 'payment_intent', status: 'requires_payment_method', amount: 1000, currency: 'usd',
    last_payment_error: { type: 'card_error', code: 'authentication_required' }, metadata: { account_id: account, tollgate: 'auto_topup', attempt: '1' } } } });
  assert.equal((await postEvent(gw, failed, sign(failed))).status, 200);
  await sleep(2200); // past the gateway's 2 s view of armed accounts: the stop is read from the store, not just remembered
  await spend(gw, key);
  await sleep(300);
  assert.equal(api.of('/v1/payment_intents').length, 1, 'no retry while authentication is required');
  assert.deepEqual(await getAutoTopup(s, account), { enabled: true, threshold: 5, amount: 10, status: 'authentication_required', card: 'pm_card_visa' });
  const before = await balance(gw, key);

  // Updating the settings lifts the stop; the next dip charges again, under a new idempotency key.
  api.paymentIntent = (form) => [200, { id: 'pi_test_ok', object: 'payment_intent', status: 'succeeded', amount: Number(form.amount), currency: 'usd', metadata: metadataOf(form) }];
  await setAutoTopup(s, account, { enabled: true, threshold: '5', amount: '10' });
  assert.equal((await getAutoTopup(s, account)).status, null);
  await until('a second charge', async () => { await spend(gw, key, 1); return api.of('/v1/payment_intents').length === 2; });
  const [first, second] = api.of('/v1/payment_intents');
  assert.notEqual(first.headers['idempotency-key'], second.headers['idempotency-key']);
  assert.ok(await balance(gw, key) < before, 'nothing credited before the webhook');
  await assertInvariants(assert, gw, account);
});

test('sandbox auto top-up charges the saved card through its own signed webhook', async (t) => {
  const gw = await startBilling(t);
  const s = await openStore(t, gw);
  const { account, key } = await gw.account('1');
  const { url } = await (await gw.fetch('/svc/v1/billing/card', { method: 'POST', headers: { authorization: `Bearer ${key}` } })).json();
  await gw.fetch(new URL(url).pathname, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'card_number=4242424242424242' });
  await setAutoTopup(s, account, { enabled: true, threshold: '2', amount: '15' });
  const start = await balance(gw, key);
  await spend(gw, key);
  await until('the sandbox top-up', async () => (await getAutoTopup(s, account)).status === 'succeeded');
  assert.deepEqual(await ledgerCredits(s, account, 'topup:'), { n: 1, total: dollarsToNano('15') });
  const debits = await s.query(`SELECT coalesce(sum(amount_nd), 0)::text AS d FROM ledger WHERE account_id = $1 AND kind = 'debit'`, [account]);
  assert.equal(await balance(gw, key), start + dollarsToNano('15') + BigInt(debits.rows[0].d));
  await assertInvariants(assert, gw, account);
});

test('setAutoTopup refuses bad values with a 422 naming the field', async (t) => {
  const gw = await startBilling(t);
  const s = await openStore(t, gw);
  const { account } = await gw.account('1');
  for (const [v, param] of [
    [{ threshold: 'ten', amount: '20' }, 'threshold'], [{ threshold: '0', amount: '20' }, 'threshold'], [{ threshold: '5.001', amount: '20' }, 'threshold'],
    [{ threshold: '5', amount: '4.99' }, 'amount'], [{ threshold: '5', amount: '1000.01' }, 'amount'], [{ threshold: '5', amount: '' }, 'amount'],
  ]) {
    await assert.rejects(setAutoTopup(s, account, { enabled: true, ...v }), (e) => e.status === 422 && e.param === param, JSON.stringify(v));
  }
  await setAutoTopup(s, account, { enabled: false, threshold: '$7.50', amount: '1000' });
  assert.deepEqual(await getAutoTopup(s, account), { enabled: false, threshold: 7.5, amount: 1000, status: null, card: null });
  await assertInvariants(assert, gw, account);
});

// Admission end to end: 402 for balance and ceiling, 429 for rpm and concurrency, and the hold rule under load.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, chatBody, assertInvariants, priceNano, dollarsToNano } from './helpers/gateway.mjs';

const post = (gw, key, body = chatBody(), extra = {}, signal = undefined) =>
  gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), ...extra }, body, signal });

async function openHolds(gw) {
  const m = await (await gw.fetch('/metrics')).text();
  return Number(/^tollgate_open_holds (\d+)/m.exec(m)[1]);
}

test('an account with no balance gets 402 insufficient_balance and nothing runs', async (t) => {
  const gw = await startGateway(t);
  const { key, account } = await gw.account('0');
  const res = await post(gw, key);
  assert.equal(res.status, 402);
  const { error } = await res.json();
  assert.equal(error.code, 'insufficient_balance');
  assert.equal(error.type, 'insufficient_quota');
  const show = await gw.cli('account', 'show', account);
  assert.equal(show.balance, 0);
  assert.equal(show.ledger_total, 0);
});

test('a key at its spend ceiling gets 402 key_spend_limit_reached telling how to go on', async (t) => {
  const gw = await startGateway(t);
  const { key, account } = await gw.account('10', { spendLimit: '0.0002', period: 'daily' });
  let res;
  for (let i = 0; i < 20; i++) {
    res = await post(gw, key, chatBody({ max_tokens: 40 }));
    if (res.status !== 200) break;
    await res.json();
  }
  assert.equal(res.status, 402);
  const { error } = await res.json();
  assert.equal(error.code, 'key_spend_limit_reached');
  assert.match(error.message, /raise the ceiling or use another key/i);
  // another key of the same account still works
  const other = await gw.newKey(account);
  const ok = await post(gw, other.key);
  assert.equal(ok.status, 200);
  await ok.json();
  await assertInvariants(assert, gw, account);
});

test('over its rpm a key gets 429 rate_limit_exceeded with Retry-After and x-ratelimit headers', async (t) => {
  const gw = await startGateway(t, { redis: true });
  const { key, account } = await gw.account('10', { rpm: 3 });
  const seen = [];
  for (let i = 0; i < 3; i++) {
    const r = await post(gw, key);
    assert.equal(r.status, 200);
    seen.push(r.headers.get('x-ratelimit-remaining-requests'));
    assert.equal(r.headers.get('x-ratelimit-limit-requests'), '3');
    await r.json();
  }
  assert.deepEqual(seen, ['2', '1', '0']);
  const res = await post(gw, key);
  assert.equal(res.status, 429);
  assert.ok(Number(res.headers.get('retry-after')) >= 1);
  assert.equal(res.headers.get('x-ratelimit-limit-requests'), '3');
  assert.equal(res.headers.get('x-ratelimit-remaining-requests'), '0');
  assert.match(res.headers.get('x-ratelimit-reset-requests'), /^\d+(ms|s|m\d+s)$/);
  const { error } = await res.json();
  assert.equal(error.code, 'rate_limit_exceeded');
  await assertInvariants(assert, gw, account);
});

for (const redis of [false, true]) {
  test(`a key at its concurrency limit gets 429 concurrency_limit_exceeded (${redis ? 'Redis' : 'in-process'} limits)`, async (t) => {
    const gw = await startGateway(t, { redis, store: redis ? 'postgres' : 'pglite' });
    const { key, account } = await gw.account('10', { concurrency: 1 });
    const ctl = new AbortController();
    // A stream the client leaves is stopped at once (a buffered request would run on to the upstream's end).
    const hanging = post(gw, key, chatBody({ stream: true }), { 'x-sim-hang': '1' }, ctl.signal).catch((e) => e);
    const deadline = Date.now() + 3000;
    let res;
    do {
      await new Promise((r) => setTimeout(r, 50));
      res = await post(gw, key);
      if (res.status === 429) break;
      await res.text();
    } while (Date.now() < deadline);
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('retry-after'), '1');
    // The request budget as the OpenAI clients read it: the hanging request took one of 600 tokens.
    assert.equal(res.headers.get('x-ratelimit-limit-requests'), '600');
    const remaining = Number(res.headers.get('x-ratelimit-remaining-requests'));
    assert.ok(Number.isInteger(remaining) && remaining >= 0 && remaining < 600, `remaining ${remaining}`);
    assert.match(res.headers.get('x-ratelimit-reset-requests'), /^\d+(ms|s|m\d+s)$/);
    assert.equal((await res.json()).error.code, 'concurrency_limit_exceeded');
    ctl.abort();
    assert.equal((await hanging).name, 'AbortError');
    // The client left before anything was produced: its hold is released and nothing is billed.
    const until = Date.now() + 2000;
    while ((await openHolds(gw)) !== 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 25));
    const after = await post(gw, key);
    assert.equal(after.status, 200);
    const { usage } = await after.json();
    const show = await gw.cli('account', 'show', account);
    assert.equal(dollarsToNano(show.balance), dollarsToNano('10') - priceNano(usage.prompt_tokens, usage.completion_tokens));
    await assertInvariants(assert, gw, account);
  });
}

test('50 concurrent requests overshoot a spend ceiling by at most one request', async (t) => {
  const gw = await startGateway(t, { redis: true });
  const ceiling = '0.001';
  const { key, account, prefix } = await gw.account('10', { spendLimit: ceiling, period: 'monthly', concurrency: 100 });
  const body = chatBody({ max_tokens: 48 });
  const results = await Promise.all(Array.from({ length: 50 }, () =>
    post(gw, key, body, { 'x-sim-token-delay-ms': '2' }).then(async (r) => ({ status: r.status, body: await r.json() }))));
  const ok = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status === 402);
  assert.equal(ok.length + refused.length, 50);
  assert.ok(refused.length > 0, 'the ceiling refused some');
  for (const r of refused) assert.equal(r.body.error.code, 'key_spend_limit_reached');
  const costs = ok.map((r) => priceNano(r.body.usage.prompt_tokens, r.body.usage.completion_tokens));
  const spent = costs.reduce((a, b) => a + b, 0n);
  const maxOne = costs.reduce((a, b) => (b > a ? b : a), 0n);
  assert.ok(spent <= dollarsToNano(ceiling) + maxOne, `spent ${spent} within ceiling + one request (${maxOne})`);
  const keys = await gw.cli('key', 'list', '--account', account);
  const k = keys.keys.find((x) => x.prefix === prefix);
  assert.equal(dollarsToNano(k.usage_monthly), spent, 'the ledger holds exactly the admitted requests');
  await assertInvariants(assert, gw, account);
});

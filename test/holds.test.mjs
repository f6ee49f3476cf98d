// Known costs never take a balance below zero: a hold the available balance or the ceiling's remainder cannot cover is refused (402 with both figures).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, chatBody, assertInvariants, freshDatabase, dollarsToNano } from './helpers/gateway.mjs';

const LIMITERS = [{ name: 'in process', opts: { store: 'pglite' } }, { name: 'Redis', opts: { redis: true } }];
const json = (key) => ({ ...bearer(key), 'content-type': 'application/json' });
const tts = (gw, key, text) => gw.fetch('/beta/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb?output_format=pcm_24000',
  { method: 'POST', headers: { 'xi-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ text, model_id: 'eleven_multilingual_v2' }) });

for (const { name, opts } of LIMITERS) {
  test(`a $0.01 account asking 10,000 characters of speech gets 402 saying what it needs, and nothing is billed (${name})`, async (t) => {
    const gw = await startGateway(t, opts);
    const { key, account } = await gw.account('0.01');
    // sim-tts: $15 per million characters, so 10,000 characters cost $0.15.
    const res = await tts(gw, key, 'a'.repeat(10_000));
    assert.equal(res.status, 402);
    const body = await res.json();
    assert.equal(body.detail.status, 'insufficient_balance');
    assert.match(body.detail.message, /needs up to \$0\.15 \(150000000 nd\); \$0\.01 \(10000000 nd\) is available/);
    // A request the balance covers still runs, and the balance stays above zero.
    const ok = await tts(gw, key, 'a'.repeat(500));
    assert.equal(ok.status, 200);
    await ok.arrayBuffer();
    const show = await gw.cli('account', 'show', account);
    assert.equal(show.balance, 0.0025);
    await assertInvariants(assert, gw, account);
  });

  test(`a chat whose max_tokens worst case exceeds the balance gets 402; without max_tokens the spec's minimum applies (${name})`, async (t) => {
    const gw = await startGateway(t, opts);
    const { key, account } = await gw.account('0.01');
    // 4,096 output tokens at $2.50 per million: $0.01024 alone, more than the balance.
    let res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: json(key), body: chatBody({ max_tokens: 4096 }) });
    assert.equal(res.status, 402);
    const { error } = await res.json();
    assert.equal(error.code, 'insufficient_balance');
    assert.equal(error.type, 'insufficient_quota');
    assert.match(error.message, /needs up to \$0\.0102\d* \(\d+ nd\); \$0\.01 \(10000000 nd\) is available/);
    assert.equal((await gw.cli('account', 'show', account)).ledger_total, 0.01, 'nothing billed');
    res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: json(key), body: chatBody({ max_tokens: 40 }) });
    assert.equal(res.status, 200);
    await res.json();
    await assertInvariants(assert, gw, account);
  });

  test(`a known cost past the key's ceiling remainder gets 402 key_spend_limit_reached with the remainder (${name})`, async (t) => {
    const gw = await startGateway(t, opts);
    const { key, account } = await gw.account('10', { spendLimit: '0.01', period: 'daily' });
    const res = await tts(gw, key, 'a'.repeat(1_000));
    assert.equal(res.status, 402);
    const body = await res.json();
    assert.equal(body.detail.status, 'key_spend_limit_reached');
    assert.match(body.detail.message, /needs up to \$0\.015 \(15000000 nd\); \$0\.01 \(10000000 nd\) is available under the daily spend limit/);
    assert.equal((await gw.cli('account', 'show', account)).balance, 10);
    await assertInvariants(assert, gw, account);
  });
}

test('limits.allow_overdraft admits a known cost on balance > 0 alone (the specification\'s minimum)', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', limits: { allow_overdraft: true } });
  const { key, account } = await gw.account('0.01');
  const res = await tts(gw, key, 'a'.repeat(10_000));
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const show = await gw.cli('account', 'show', account);
  assert.equal(show.balance, -0.14);
  // Now at or below zero: the next request is refused as before.
  assert.equal((await tts(gw, key, 'a')).status, 402);
  await assertInvariants(assert, gw, account);
});

test('known costs racing on two instances sharing PostgreSQL and Redis never take the balance below zero', async (t) => {
  const db = await freshDatabase();
  t.after(() => db.drop());
  const a = await startGateway(t, { redis: true, database: db });
  const b = await startGateway(t, { redis: true, database: db, redisPrefix: a.redisPrefix });
  const { key, account } = await a.account('0.01');
  // Each costs $0.006: the balance covers one, not two, whichever instance admits it.
  const replies = await Promise.all(Array.from({ length: 8 }, (_, i) => tts(i % 2 ? b : a, key, 'a'.repeat(400))));
  const statuses = await Promise.all(replies.map(async (r) => { await r.arrayBuffer(); return r.status; }));
  assert.deepEqual(statuses.filter((s) => s === 200).length, 1, `one admitted: ${statuses}`);
  assert.ok(statuses.every((s) => s === 200 || s === 402));
  const show = await a.cli('account', 'show', account);
  assert.equal(dollarsToNano(show.balance), 4_000_000n);
  await assertInvariants(assert, a, account);
});

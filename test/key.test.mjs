// GET /svc/v1/key field by field after usage, and the balance moving by exactly price × usage.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, chatBody, assertInvariants, priceNano, dollarsToNano } from './helpers/gateway.mjs';

function nanoToNumber(n) {
  const neg = n < 0n;
  const a = neg ? -n : n;
  const frac = (a % 1_000_000_000n).toString().padStart(9, '0').replace(/0+$/, '');
  return Number(`${neg ? '-' : ''}${a / 1_000_000_000n}${frac ? `.${frac}` : ''}`);
}

for (const store of ['postgres', 'pglite']) {
  test(`key inspection reports limits, usage and balance exactly after billed requests (${store})`, async (t) => {
    const gw = await startGateway(t, { store });
    const { key, account, prefix } = await gw.account('3', { label: 'ci key', spendLimit: '1.5', period: 'daily', rpm: 120, concurrency: 4 });
    const before = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
    assert.deepEqual(before, {
      label: 'ci key', prefix, limit: 1.5, limit_remaining: 1.5, limit_reset: 'daily',
      usage_daily: 0, usage_monthly: 0, fallback: false, rate_limit: { rpm: 120, concurrency: 4, tpm: null, characters_per_minute: null, audio_seconds_per_minute: null }, balance: 3,
    });
    let spent = 0n;
    for (const extra of [{}, { max_tokens: 5 }, { messages: [{ role: 'user', content: 'A longer prompt, with several words, to change the count.' }] }]) {
      const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody(extra) });
      assert.equal(res.status, 200);
      const body = await res.json();
      assert.ok(body.usage.prompt_tokens > 0 && body.usage.completion_tokens > 0);
      spent += priceNano(body.usage.prompt_tokens, body.usage.completion_tokens);
      const now = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
      assert.equal(now.balance, nanoToNumber(dollarsToNano('3') - spent), 'balance moved by exactly price × usage');
    }
    const after = await (await gw.fetch('/svc/v1/key', { headers: { 'xi-api-key': key } })).json();
    assert.deepEqual(Object.keys(after).sort(), ['balance', 'fallback', 'label', 'limit', 'limit_remaining', 'limit_reset', 'prefix', 'rate_limit', 'usage_daily', 'usage_monthly']);
    assert.equal(after.usage_daily, nanoToNumber(spent));
    assert.equal(after.usage_monthly, nanoToNumber(spent));
    assert.equal(after.limit_remaining, nanoToNumber(dollarsToNano('1.5') - spent));
    await assertInvariants(assert, gw, account);
  });
}

test('a key without a ceiling shows null limits and the default tier', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', limits: { default_rpm: 77, default_concurrency: 9 } });
  const { key } = await gw.account('1');
  const k = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
  assert.equal(k.limit, null);
  assert.equal(k.limit_remaining, null);
  assert.equal(k.limit_reset, null);
  assert.deepEqual(k.rate_limit, { rpm: 77, concurrency: 9, tpm: null, characters_per_minute: null, audio_seconds_per_minute: null });
});

// Published prices: every model of GET /alpha/v1/models (and /{model}) and of GET /beta/v1/models carries
// `pricing`, decimal-dollar strings per unit, equal to the configured prices, and a debit is what they say.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EMBEDDED_DEFAULT } from '../dist/config.js';
import { startGateway, assertInvariants, bearer, chatBody } from './helpers/gateway.mjs';

const PRICE_FIELDS = ['input_per_mtok', 'output_per_mtok', 'per_mchar', 'audio_in_per_minute', 'audio_out_per_minute',
  'audio_input_per_mtok', 'audio_output_per_mtok', 'cached_input_per_mtok'];

/** A decimal dollar string (or number) as integer nanodollars, parsed here, not by the gateway. */
function nano(d) {
  const [w, f = ''] = String(d).split('.');
  assert.ok(f.length <= 9, `${d}`);
  return BigInt(w) * 1_000_000_000n + BigInt(f.padEnd(9, '0'));
}

/** The configured price of `field` in nanodollars per its unit (a per-second audio price is 60 times per minute). */
function configured(m, field) {
  if (m[field] !== undefined) return nano(m[field]);
  const perSecond = field.replace('per_minute', 'per_second');
  if (perSecond !== field && m[perSecond] !== undefined) return nano(m[perSecond]) * 60n;
  return undefined;
}

function assertPublished(m, pricing, where) {
  assert.equal(typeof pricing, 'object', `${where}: no pricing`);
  assert.equal(pricing.currency, 'usd');
  for (const field of PRICE_FIELDS) {
    const want = configured(m, field);
    // A unit the model is not billed by may be left out when it is free (sim-embed's output "0").
    if (want === undefined || (want === 0n && pricing[field] === undefined)) continue;
    assert.equal(typeof pricing[field], 'string', `${where}.${field}`);
    assert.match(pricing[field], /^\d+(\.\d{1,9})?$/, `${where}.${field}`);
    assert.equal(nano(pricing[field]), want, `${where}.${field}`);
  }
  for (const [field, v] of Object.entries(pricing)) {
    if (field === 'currency' || field === 'batch') continue;
    assert.ok(PRICE_FIELDS.includes(field), `${where}: unknown unit ${field}`);
    assert.equal(nano(v), configured(m, field) ?? 0n, `${where}.${field}`);
  }
}

test('every model of the embedded default lists its configured unit prices in GET /alpha/v1/models, /v1/models/{model} and the beta models list', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const { key } = await gw.account('1');
  const list = await (await gw.fetch('/alpha/v1/models', { headers: bearer(key) })).json();
  const byId = new Map(list.data.map((m) => [m.id, m]));
  for (const m of EMBEDDED_DEFAULT.models) {
    assert.ok(byId.has(m.id), m.id);
    assertPublished(m, byId.get(m.id).pricing, m.id);
    for (const name of [m.id, ...(m.aliases ?? [])]) {
      const one = await (await gw.fetch(`/v1/models/${name}`, { headers: bearer(key) })).json();
      assertPublished(m, one.pricing, `/v1/models/${name}`);
    }
  }
  const beta = await (await gw.fetch('/beta/v1/models', { headers: { 'xi-api-key': key } })).json();
  assert.ok(beta.length > 0);
  for (const b of beta) {
    const m = EMBEDDED_DEFAULT.models.find((x) => x.id === b.model_id);
    assertPublished(m, b.pricing, `beta ${b.model_id}`);
    if (m.kind === 'tts') assert.equal(nano(b.pricing.per_mchar), nano(m.per_mchar));
  }
});

test('a config\'s per-second audio price is published per minute, a batch discount under pricing.batch, and a chat debit is what the published prices say', async (t) => {
  const models = [
    { id: 'chat-a', upstream: 'sim', upstream_model: 'sim-chat', kind: 'chat', input_per_mtok: '0.123456789', output_per_mtok: '7', batch_discount_percent: 50, max_output_tokens: 64 },
    { id: 'stt-a', upstream: 'sim', upstream_model: 'sim-stt', kind: 'stt', audio_in_per_second: '0.0001' },
  ];
  const gw = await startGateway(t, { store: 'pglite', models });
  const { key, account } = await gw.account('1');
  const list = (await (await gw.fetch('/v1/models', { headers: bearer(key) })).json()).data;
  const chat = list.find((m) => m.id === 'chat-a');
  assert.deepEqual(chat.pricing, { currency: 'usd', input_per_mtok: '0.123456789', output_per_mtok: '7',
    batch: { input_per_mtok: '0.061728394', output_per_mtok: '3.5' } });
  assert.deepEqual(list.find((m) => m.id === 'stt-a').pricing, { currency: 'usd', audio_in_per_minute: '0.006' });
  const before = (await gw.cli('account', 'show', account)).balance;
  const r = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: chatBody({ model: 'chat-a' }) });
  const u = (await r.json()).usage;
  // The debit, priced from the published strings alone: ceil(Σ units × price / 1M).
  const num = BigInt(u.prompt_tokens) * nano(chat.pricing.input_per_mtok) + BigInt(u.completion_tokens) * nano(chat.pricing.output_per_mtok);
  const expected = (num + 999_999n) / 1_000_000n;
  let spent = 0n;
  for (let i = 0; i < 60; i++) {
    spent = BigInt(Math.round((before - (await gw.cli('account', 'show', account)).balance) * 1e9));
    if (spent === expected) break;
    await new Promise((x) => setTimeout(x, 50));
  }
  assert.equal(spent, expected);
  await assertInvariants(assert, gw, account);
});

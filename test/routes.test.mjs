// Rules shared by every route: envelopes for 404/405/413/422, request ids, the /v1 alias, health and metrics.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, chatBody } from './helpers/gateway.mjs';

test('unknown routes are 404 and wrong methods 405, both in the error envelope', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('1');
  const nf = await gw.fetch('/alpha/v1/nope', { headers: bearer(key) });
  assert.equal(nf.status, 404);
  assert.equal((await nf.json()).error.code, 'not_found');
  // (GET /v1/chat/completions lists stored completions: a route answered as not offered, docs/compatibility.md.)
  const na = await gw.fetch('/v1/embeddings', { method: 'GET', headers: bearer(key) });
  assert.equal(na.status, 405);
  assert.equal(na.headers.get('allow'), 'POST');
  const body = await na.json();
  assert.equal(body.error.code, 'method_not_allowed');
  assert.equal(body.error.param, null);
});

test('every response carries x-request-id, the client one when it is sane', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('1');
  const mine = await gw.fetch('/svc/v1/key', { headers: { ...bearer(key), 'x-request-id': 'client-req-12345' } });
  assert.equal(mine.headers.get('x-request-id'), 'client-req-12345');
  const insane = await gw.fetch('/svc/v1/key', { headers: { ...bearer(key), 'x-request-id': 'a b' } });
  assert.match(insane.headers.get('x-request-id'), /^req_[0-9A-Za-z]{24}$/);
  const err = await gw.fetch('/nowhere');
  assert.match(err.headers.get('x-request-id'), /^req_/);
});

test('a body that fails its schema is 422 with the first bad field as param and a detail list', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('1');
  const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: JSON.stringify({ model: 'sim-chat', messages: [] }) });
  assert.equal(res.status, 422);
  const body = await res.json();
  assert.equal(body.error.code, 'validation_error');
  assert.equal(body.error.param, 'messages');
  assert.ok(Array.isArray(body.detail) && body.detail.length > 0);
  assert.deepEqual(body.detail[0].loc, ['body', 'messages']);
  assert.equal(typeof body.detail[0].msg, 'string');
  assert.equal(typeof body.detail[0].type, 'string');
  const bad = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: '{not json' });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.code, 'invalid_json');
});

test('a body over the route limit is refused with 413 and nothing is billed', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', limits: { max_body_bytes: 2048 } });
  const { key, account } = await gw.account('1');
  const big = chatBody({ messages: [{ role: 'user', content: 'x'.repeat(5000) }] });
  const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: big });
  assert.equal(res.status, 413);
  assert.equal((await res.json()).error.code, 'request_too_large');
  const show = await gw.cli('account', 'show', account);
  assert.equal(show.balance, 1);
});

test('/v1 is an alias of /alpha/v1', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('1');
  const a = await (await gw.fetch('/v1/models', { headers: bearer(key) })).json();
  const b = await (await gw.fetch('/alpha/v1/models', { headers: bearer(key) })).json();
  assert.deepEqual(a, b);
  assert.ok(a.data.some((m) => m.id === 'sim-chat' && m.simulated === true));
});

test('health needs no key and metrics report requests, overhead, rejections and ledger writes', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('1');
  assert.equal((await gw.fetch('/health')).status, 200);
  const ok = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() });
  assert.equal(ok.status, 200);
  await ok.json();
  await gw.fetch('/v1/models');
  const text = await (await gw.fetch('/metrics')).text();
  assert.match(text, /tollgate_requests_total\{route="chat.completions",status="200"\} 1/);
  assert.match(text, /tollgate_gateway_overhead_ms_count\{route="chat.completions"\} 1/);
  assert.match(text, /tollgate_ledger_writes_total [1-9]/);
  const { key: poor } = await gw.account('0');
  await (await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(poor), body: chatBody() })).text();
  const after = await (await gw.fetch('/metrics')).text();
  assert.match(after, /tollgate_admission_rejections_total\{reason="insufficient_balance"\} 1/);
});

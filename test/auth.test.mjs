// Keys on every route: both headers, the 401 cases (revocation while running included) and 403 scopes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, chatBody, assertInvariants } from './helpers/gateway.mjs';

async function errorOf(res) {
  const body = await res.json();
  assert.ok(body.error, 'error envelope');
  for (const k of ['message', 'type', 'param', 'code']) assert.ok(k in body.error, `envelope has ${k}`);
  return body.error;
}

test('a key works in the Authorization header and in xi-api-key', async (t) => {
  const gw = await startGateway(t);
  const { key, account } = await gw.account('5');
  const a = await gw.fetch('/svc/v1/key', { headers: { authorization: `Bearer ${key}` } });
  assert.equal(a.status, 200);
  const b = await gw.fetch('/svc/v1/key', { headers: { 'xi-api-key': key } });
  assert.equal(b.status, 200);
  assert.equal((await b.json()).prefix, key.slice(0, 12));
  const c = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { 'xi-api-key': key, 'content-type': 'application/json' }, body: chatBody() });
  assert.equal(c.status, 200);
  await c.json();
  await assertInvariants(assert, gw, account);
});

test('missing, malformed and unknown keys get 401 invalid_api_key in the envelope', async (t) => {
  const gw = await startGateway(t);
  const cases = [
    {},
    { authorization: 'Bearer' },
    { authorization: 'Basic abc' },
    { authorization: 'Bearer sk-not-ours' },
    { authorization: `Bearer svc_live_${'A'.repeat(40)}` },
    { 'xi-api-key': 'nope' },
  ];
  for (const headers of cases) {
    for (const path of ['/svc/v1/key', '/v1/models', '/alpha/v1/chat/completions', '/beta/v1/nothing-here']) {
      const res = await gw.fetch(path, { method: path.includes('chat') ? 'POST' : 'GET', headers, body: path.includes('chat') ? chatBody() : undefined });
      if (path.startsWith('/beta/v1/nothing')) { assert.equal(res.status, 404); await res.text(); continue; }
      assert.equal(res.status, 401, `${JSON.stringify(headers)} ${path}`);
      const e = await errorOf(res);
      assert.equal(e.code, 'invalid_api_key');
      assert.equal(e.type, 'invalid_request_error');
      assert.equal(e.param, null);
      assert.ok(res.headers.get('x-request-id'));
    }
  }
});

test('a key revoked while the gateway runs is refused within a second', async (t) => {
  const gw = await startGateway(t);
  const { key, prefix } = await gw.account('5');
  assert.equal((await gw.fetch('/svc/v1/key', { headers: bearer(key) })).status, 200);
  const revoked = await gw.cli('key', 'revoke', prefix);
  assert.ok(revoked.revoked_at);
  const deadline = Date.now() + 1000;
  let status;
  do {
    status = (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).status;
    if (status === 401) break;
    await new Promise((r) => setTimeout(r, 50));
  } while (Date.now() < deadline);
  assert.equal(status, 401);
  const e = await errorOf(await gw.fetch('/v1/models', { headers: bearer(key) }));
  assert.match(e.message, /revoked/);
});

test('a key without the route scope gets 403 insufficient_scope naming the scope', async (t) => {
  const gw = await startGateway(t);
  const { key } = await gw.account('5', { scopes: 'voice' });
  const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() });
  assert.equal(res.status, 403);
  const e = await errorOf(res);
  assert.equal(e.code, 'insufficient_scope');
  assert.match(e.message, /`llm`/);
  // models and /svc take any valid key
  assert.equal((await gw.fetch('/v1/models', { headers: bearer(key) })).status, 200);
  assert.equal((await gw.fetch('/svc/v1/key', { headers: bearer(key) })).status, 200);
});

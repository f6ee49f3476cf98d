// `upstream_model` per upstream of a pool (issue 27): whichever upstream answers gets the model name it knows,
// on every text route, the Responses API translated to chat included.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, assertInvariants } from './helpers/gateway.mjs';
import { startStub, startRecorder, errorReply } from './helpers/stub-upstream.mjs';

test('each upstream of a pool is sent its own upstream_model: chat, completions and a Responses request translated to chat all reach the second upstream under its name after the first answers 503', { timeout: 240_000 }, async (t) => {
  const busy = await startStub(t);
  busy.reply = errorReply(503);
  const rec = await startRecorder(t);
  const gw = await startGateway(t, {
    store: 'postgres',
    upstreams: { busy: { base_url: busy.url }, rec: { base_url: rec.url } },
    models: [{
      id: 'pooled-chat', kind: 'chat', upstream_model: 'name-of-the-model', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096,
      upstream: [{ name: 'busy', upstream_model: 'name-on-busy' }, { name: 'rec', priority: 1, upstream_model: 'name-on-rec' }],
    }],
  });
  const { key, account } = await gw.account('5');
  const post = (path, body) => fetch(`${gw.url}/v1${path}`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const replies = [
    await post('/chat/completions', { model: 'pooled-chat', messages: [{ role: 'user', content: 'hi' }] }),
    await post('/completions', { model: 'pooled-chat', prompt: 'hi' }),
    await post('/responses', { model: 'pooled-chat', input: 'hi' }),
  ];
  for (const r of replies) assert.equal(r.status, 200, await r.clone().text());
  const bodies = await Promise.all(replies.map((r) => r.json()));
  assert.deepEqual(bodies.map((b) => b.model), ['pooled-chat', 'pooled-chat', 'pooled-chat'], 'the client sees the model it asked for');
  assert.equal(busy.count('POST /v1/'), 3, 'the first upstream was tried for each');
  assert.deepEqual(rec.paths, ['/v1/chat/completions', '/v1/completions', '/v1/chat/completions']);
  assert.deepEqual(rec.bodies.map((b) => b.model), ['name-on-rec', 'name-on-rec', 'name-on-rec'], 'the answering upstream got its own model name');
  await assertInvariants(assert, gw, account);
});

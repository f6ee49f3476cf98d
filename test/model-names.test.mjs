// Replies name the model by Tollgate's id (an alias by its model's id), whatever the upstream calls it, on every route.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, TEST_MODELS, assertInvariants } from './helpers/gateway.mjs';

/** Served by sim under its own names, offered under others (the example config's gemma and bge-m3, and an alias). */
export const RENAMED_MODELS = [
  ...TEST_MODELS,
  { id: 'gemma-3-27b-it', upstream: 'sim', upstream_model: 'sim-chat', aliases: ['gemma-27b'], kind: 'chat',
    input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 },
  { id: 'bge-m3', upstream: 'sim', upstream_model: 'sim-embed', kind: 'embedding', input_per_mtok: '0.02', max_output_tokens: 1 },
];

async function post(gw, key, path, body) {
  const res = await gw.fetch(path, { method: 'POST', headers: bearer(key), body: JSON.stringify(body) });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return text;
}

const events = (text) => text.split(/\n\n/).filter((e) => e.includes('data: {')).map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 6)));

test('chat, completions and embeddings replies and every stream chunk name the model the client asked for, not the upstream\'s', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', models: RENAMED_MODELS });
  const { key, account } = await gw.account('2');
  for (const [asked, named] of [['gemma-3-27b-it', 'gemma-3-27b-it'], ['gemma-27b', 'gemma-3-27b-it']]) {
    const messages = [{ role: 'user', content: 'Say hello.' }];
    const chat = await post(gw, key, '/v1/chat/completions', { model: asked, messages });
    assert.equal(JSON.parse(chat).model, named, asked);
    const stream = await post(gw, key, '/v1/chat/completions', { model: asked, messages, stream: true, stream_options: { include_usage: true } });
    const chunks = events(stream);
    assert.ok(chunks.length > 3 && chunks.at(-1).usage, 'the stream and its usage chunk came through');
    assert.deepEqual([...new Set(chunks.map((c) => c.model))], [named], asked);
    const plain = events(await post(gw, key, '/v1/chat/completions', { model: asked, messages, stream: true }));
    assert.deepEqual([...new Set(plain.map((c) => c.model))], [named], asked);
    const legacy = await post(gw, key, '/v1/completions', { model: asked, prompt: 'Once', max_tokens: 5 });
    assert.equal(JSON.parse(legacy).model, named);
    const legacyStream = events(await post(gw, key, '/v1/completions', { model: asked, prompt: 'Once', max_tokens: 5, stream: true }));
    assert.deepEqual([...new Set(legacyStream.map((c) => c.model))], [named]);
    const resp = JSON.parse(await post(gw, key, '/v1/responses', { model: asked, input: 'Hi' }));
    assert.equal(resp.model, named);
    for (const text of [chat, stream, legacy]) assert.doesNotMatch(text, /sim-chat/, 'the upstream\'s name never reaches the client');
  }
  const emb = await post(gw, key, '/v1/embeddings', { model: 'bge-m3', input: ['one', 'two'] });
  assert.equal(JSON.parse(emb).model, 'bge-m3');
  assert.doesNotMatch(emb, /sim-embed/);
  // A model served under its own name is answered byte for byte as the upstream wrote it.
  assert.equal(JSON.parse(await post(gw, key, '/v1/chat/completions', { model: 'sim-chat', messages: [{ role: 'user', content: 'x' }] })).model, 'sim-chat');
  assert.equal(JSON.parse(await post(gw, key, '/v1/chat/completions', { model: 'tollgate-27b', messages: [{ role: 'user', content: 'x' }] })).model, 'sim-chat');
  await assertInvariants(assert, gw, account);
});

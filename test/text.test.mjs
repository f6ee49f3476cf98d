// Completions, embeddings and the Responses API (translated to chat for upstreams without it), billed exactly.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, assertInvariants, priceNano, dollarsToNano } from './helpers/gateway.mjs';

async function call(gw, key, path, body) {
  const res = await gw.fetch(path, { method: 'POST', headers: bearer(key), body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

async function balance(gw, account) {
  return dollarsToNano((await gw.cli('account', 'show', account)).balance);
}

test('completions and embeddings move the balance by exactly price × usage', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('1');
  const c = await call(gw, key, '/v1/completions', { model: 'sim-chat', prompt: 'Once upon a time', max_tokens: 12 });
  assert.equal(c.status, 200);
  const cj = JSON.parse(c.text);
  assert.equal(cj.object, 'text_completion');
  assert.equal(cj.usage.completion_tokens, 12);
  let expected = dollarsToNano('1') - priceNano(cj.usage.prompt_tokens, cj.usage.completion_tokens);
  assert.equal(await balance(gw, account), expected);
  const e = await call(gw, key, '/alpha/v1/embeddings', { model: 'sim-embed', input: ['one two three', 'four'], encoding_format: 'base64' });
  assert.equal(e.status, 200);
  const ej = JSON.parse(e.text);
  assert.equal(ej.data.length, 2);
  const raw = Buffer.from(ej.data[0].embedding, 'base64');
  const vec = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length));
  assert.ok(Math.abs(Math.hypot(...vec) - 1) < 1e-5, 'a unit vector');
  assert.equal(vec.length, 384);
  expected -= priceNano(ej.usage.prompt_tokens, 0, 20_000_000n, 0n);
  assert.equal(await balance(gw, account), expected);
  const wrongKind = await call(gw, key, '/v1/embeddings', { model: 'sim-chat', input: 'x' });
  assert.equal(wrongKind.status, 404);
  assert.match(JSON.parse(wrongKind.text).error.message, /not a embedding model|Did you mean `sim-embed`/);
  await assertInvariants(assert, gw, account);
});

test('a Responses request is answered in the Responses shape from a chat upstream, and billed', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('1');
  const r = await call(gw, key, '/v1/responses', { model: 'sim-chat', instructions: 'Be brief.', input: 'Hello there', max_output_tokens: 20, metadata: { a: 'b' } });
  assert.equal(r.status, 200);
  const body = JSON.parse(r.text);
  assert.equal(body.object, 'response');
  assert.match(body.id, /^resp_/);
  assert.equal(body.status, body.usage.output_tokens >= 20 ? 'incomplete' : 'completed');
  assert.equal(body.output[0].type, 'message');
  assert.equal(body.output[0].content[0].type, 'output_text');
  assert.ok(body.output[0].content[0].text.length > 0);
  assert.deepEqual(body.metadata, { a: 'b' });
  assert.equal(await balance(gw, account), dollarsToNano('1') - priceNano(body.usage.input_tokens, body.usage.output_tokens));
  for (const p of ['previous_response_id', 'conversation', 'background', 'prompt_cache_key']) {
    const bad = await call(gw, key, '/v1/responses', { model: 'sim-chat', input: 'x', [p]: p === 'background' ? true : 'v' });
    assert.equal(bad.status, 400, p);
    assert.equal(JSON.parse(bad.text).error.param, p);
  }
  await assertInvariants(assert, gw, account);
});

test('a streamed Responses request emits the Responses event sequence with usage at the end', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('1');
  const r = await call(gw, key, '/v1/responses', { model: 'sim-chat', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Stream please' }] }], stream: true });
  assert.equal(r.status, 200);
  const events = r.text.split('\n\n').filter(Boolean).map((e) => JSON.parse(e.split('\n').find((l) => l.startsWith('data: ')).slice(6)));
  const types = events.map((e) => e.type);
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.ok(types.includes('response.output_item.added'));
  assert.ok(types.includes('response.content_part.added'));
  assert.ok(types.filter((x) => x === 'response.output_text.delta').length > 3);
  assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
  events.forEach((e, i) => assert.equal(e.sequence_number, i));
  const done = events.at(-1).response;
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(done.output[0].content[0].text, text);
  assert.equal(await balance(gw, account), dollarsToNano('1') - priceNano(done.usage.input_tokens, done.usage.output_tokens));
});

test('Responses function tools come back as function_call items, and their outputs go back as tool messages', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('1');
  const tools = [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
  const r = JSON.parse((await call(gw, key, '/v1/responses', { model: 'sim-chat', input: 'Weather in Paris?', tools })).text);
  const fc = r.output.find((o) => o.type === 'function_call');
  assert.equal(fc.name, 'get_weather');
  assert.equal(typeof JSON.parse(fc.arguments).city, 'string');
  const follow = await call(gw, key, '/v1/responses', { model: 'sim-chat', tools, tool_choice: 'none',
    input: ['Weather in Paris?', fc, { type: 'function_call_output', call_id: fc.call_id, output: '{"temp": 21}' }].map((x) => (typeof x === 'string' ? { role: 'user', content: x } : x)) });
  assert.equal(follow.status, 200);
  assert.equal(JSON.parse(follow.text).output[0].type, 'message');
  const builtin = await call(gw, key, '/v1/responses', { model: 'sim-chat', input: 'x', tools: [{ type: 'web_search' }] });
  assert.equal(builtin.status, 400);
  assert.equal(JSON.parse(builtin.text).error.param, 'tools');
});

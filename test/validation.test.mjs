// Bodies the gateway refuses before any upstream sees them: messages that say what to fix, in OpenAI's envelope, nothing billed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, chatBody, TEST_MODELS, assertInvariants } from './helpers/gateway.mjs';
import { startSim } from '../dist/sim/index.js';

/** A gateway whose upstream is a sim on its own port, so the test can count what reached it. */
async function counted(t) {
  const sim = await startSim();
  t.after(() => sim.close());
  const gw = await startGateway(t, { store: 'pglite', upstreams: { counted: { base_url: sim.url } },
    models: TEST_MODELS.map((m) => ({ ...m, upstream: 'counted' })) });
  const { key, account } = await gw.account('1');
  const send = async (path, body, headers = bearer(key)) => {
    const res = await gw.fetch(path, { method: 'POST', headers, body });
    return { status: res.status, body: await res.json() };
  };
  return { gw, sim, key, account, send };
}

test('a wrong value is a 422 naming the field, what it must be and the value sent, with param and the detail list', async (t) => {
  const { gw, sim, account, send } = await counted(t);
  const cases = [
    [{ temperature: 5 }, 'temperature', '`temperature` must be a number from 0 to 2; got 5.'],
    [{ top_p: 'high' }, 'top_p', '`top_p` must be a number from 0 to 1; got "high".'],
    [{ n: 0 }, 'n', '`n` must be an integer from 1 to 128; got 0.'],
    [{ max_tokens: 2.5 }, 'max_tokens', '`max_tokens` must be an integer of at least 1; got 2.5.'],
    [{ stream: 'yes' }, 'stream', '`stream` must be true or false; got "yes".'],
    [{ model: undefined }, 'model', '`model` is required: a non-empty string.'],
    [{ messages: [] }, 'messages', '`messages` must be a non-empty array of messages; got an empty array.'],
  ];
  for (const [extra, param, message] of cases) {
    const { status, body } = await send('/v1/chat/completions', chatBody(extra));
    assert.equal(status, 422, param);
    assert.deepEqual(body.error, { message, type: 'invalid_request_error', param, code: 'validation_error' });
    assert.deepEqual(body.detail[0].loc, ['body', param]);
    assert.equal(body.detail[0].msg, message);
  }
  const checkout = await send('/svc/v1/billing/checkout', JSON.stringify({ amount: 2000 }));
  assert.equal(checkout.body.error.message, '`amount` must be a number from 5 to 1000; got 2000.');
  assert.equal(sim.stats().requests, 0, 'nothing reached the upstream');
  await assertInvariants(assert, gw, account);
});

test('a role outside the schema, content that is no string or parts, a body not UTF-8 and a body not sent as JSON are refused before the upstream', async (t) => {
  const { gw, sim, key, account, send } = await counted(t);
  const roles = '`system`, `developer`, `user`, `assistant`, `tool`, `function`';
  const bad = [
    [[{ role: 'robot', content: 'hi' }], 'messages[0].role', `\`messages[0].role\` must be one of ${roles}; got "robot".`],
    [[{ role: 'user', content: 'hi' }, { content: 'no role' }], 'messages[1].role', `\`messages[1].role\` is required: one of ${roles}.`],
    [[{ role: 'user', content: 5 }], 'messages[0].content', /^`messages\[0\]\.content` must be a string or an array of content parts .*; got 5\.$/],
    [[{ role: 'user', content: ['hi'] }], 'messages[0].content', /^`messages\[0\]\.content` must be a string or an array of content parts .*; got an array\.$/],
    [[{ role: 'user', content: { text: 'hi' } }], 'messages[0].content', /; got an object\.$/],
  ];
  for (const [messages, param, message] of bad) {
    const { status, body } = await send('/v1/chat/completions', chatBody({ messages }));
    assert.equal(status, 422, param);
    assert.equal(body.error.param, param);
    if (typeof message === 'string') assert.equal(body.error.message, message); else assert.match(body.error.message, message);
  }
  const latin1 = Buffer.concat([Buffer.from('{"model":"sim-chat","messages":[{"role":"user","content":"caf'), Buffer.from([0xe9]), Buffer.from('"}]}')]);
  const notUtf8 = await send('/v1/chat/completions', latin1);
  assert.equal(notUtf8.status, 400);
  assert.equal(notUtf8.body.error.code, 'invalid_encoding');
  assert.match(notUtf8.body.error.message, /not valid UTF-8/);
  for (const [type, says] of [[undefined, /had no Content-Type/], ['text/plain;charset=UTF-8', /got `text\/plain;charset=UTF-8`/],
    ['application/x-www-form-urlencoded', /send `Content-Type: application\/json`/]]) {
    const headers = { authorization: `Bearer ${key}`, ...(type ? { 'content-type': type } : {}) };
    for (const path of ['/v1/chat/completions', '/v1/embeddings', '/v1/responses']) {
      const r = await send(path, Buffer.from(chatBody()), headers); // bytes: fetch adds no content type of its own
      assert.equal(r.status, 415, `${path} ${type}`);
      assert.equal(r.body.error.code, 'unsupported_media_type');
      assert.match(r.body.error.message, says);
    }
  }
  const vendor = await send('/v1/chat/completions', chatBody(), { ...bearer(key), 'content-type': 'application/vnd.api+json; charset=utf-8' });
  assert.equal(vendor.status, 200, 'a +json type is JSON');
  assert.equal(sim.stats().requests, 1, 'only the good request reached the upstream');
  await assertInvariants(assert, gw, account);
});

test('asking for more output tokens than the model gives is a 400 naming the limit, on every text route', async (t) => {
  const { gw, sim, account, send } = await counted(t);
  const cases = [
    ['/v1/chat/completions', chatBody({ max_tokens: 5000 }), 'max_tokens'],
    ['/v1/chat/completions', chatBody({ max_completion_tokens: 4097 }), 'max_completion_tokens'],
    ['/v1/completions', JSON.stringify({ model: 'sim-chat', prompt: 'x', max_tokens: 100000 }), 'max_tokens'],
    ['/v1/responses', JSON.stringify({ model: 'tollgate-27b', input: 'x', max_output_tokens: 4097 }), 'max_output_tokens'],
  ];
  for (const [path, body, param] of cases) {
    const r = await send(path, body);
    assert.equal(r.status, 400, `${path} ${param}`);
    assert.equal(r.body.error.code, 'invalid_value');
    assert.equal(r.body.error.param, param);
    assert.match(r.body.error.message, new RegExp(`^\`${param}\` is too large: \\d+\\. The model \`sim-chat\` produces at most 4096 output tokens`));
  }
  assert.equal((await send('/v1/chat/completions', chatBody({ max_tokens: 4096 }))).status, 200, 'the limit itself is allowed');
  assert.equal(sim.stats().requests, 1);
  await assertInvariants(assert, gw, account);
});

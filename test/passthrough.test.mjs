// What reaches the model host: the client's bytes untouched unless something must change, every unknown
// field kept when something does, and never the client's key. Also: keys stay out of the gateway's logs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startGateway, bearer, chatBody, assertInvariants, priceNano, dollarsToNano } from './helpers/gateway.mjs';

/**
 * A model host that records each request's path, headers and raw body and answers like vLLM:
 * a chat completion with usage, or an SSE stream ending in a usage chunk when asked for one.
 */
function recordingUpstream(t) {
  return recordingHost(t, (body, res) => {
    const usage = { prompt_tokens: 11, completion_tokens: 2, total_tokens: 13 };
    if (body.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (o) => res.write(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: body.model, ...o })}\n\n`);
      chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: 'Hi' }, finish_reason: null }] });
      chunk({ choices: [{ index: 0, delta: { content: '!' }, finish_reason: 'stop' }] });
      if (body.stream_options?.include_usage) chunk({ choices: [], usage });
      res.end('data: [DONE]\n\n');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: body.model,
      choices: [{ index: 0, message: { role: 'assistant', content: 'Hi!' }, finish_reason: 'stop' }], usage }));
  });
}

/** A local HTTP server that records every request (path, headers, raw body) and lets `answer` reply to its parsed body. */
async function recordingHost(t, answer) {
  const seen = [];
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      const raw = Buffer.concat(parts);
      seen.push({ path: req.url, headers: req.headers, raw });
      void answer(JSON.parse(raw.toString('utf8')), res);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${server.address().port}`, seen };
}

async function gatewayOn(t, upstream, env = {}) {
  return startGateway(t, {
    store: 'pglite', env,
    upstreams: { host: { base_url: upstream.url } },
    models: [{ id: 'host-chat', upstream: 'host', upstream_model: 'org/host-chat-7b', aliases: ['host-chat-latest'], kind: 'chat',
      input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }],
  });
}

// Every accepted chat parameter, plus fields the gateway does not know: all of them must reach the host.
const PARAMS = {
  temperature: 0.3, top_p: 0.9, seed: 7, max_tokens: 20, max_completion_tokens: 20, stop: ['\n\n'], presence_penalty: 0.1,
  frequency_penalty: 0.2, logit_bias: { 50256: -100 }, logprobs: true, top_logprobs: 2, response_format: { type: 'text' },
  tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }], tool_choice: 'none',
  n: 1, user: 'u-1', reasoning_effort: 'low', modalities: ['text'],
  guided_json: { type: 'object' }, chat_template_kwargs: { enable_thinking: false }, x_vendor_hint: [1, { deep: null }],
};

test('a model id to resolve is the only change to the body, and the client key never reaches the upstream', async (t) => {
  const up = await recordingUpstream(t);
  const gw = await gatewayOn(t, up);
  const { key, account } = await gw.account('5');
  const raw = `{ "messages":[{"role":"user","content":"Hello"}],  "model" : "host-chat",\n"x_vendor_hint": [1, {"deep": null}] }`;
  const r = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: raw });
  assert.equal(r.status, 200);
  await r.json();
  const sent = up.seen.at(-1);
  assert.equal(sent.path, '/v1/chat/completions');
  assert.equal(sent.headers.authorization, undefined, 'the client key never reaches the host');
  assert.equal(sent.headers['xi-api-key'], undefined);
  assert.match(sent.headers['x-request-id'], /^\S{8,}$/, 'the host sees the request id');
  const got = JSON.parse(sent.raw.toString('utf8'));
  assert.equal(got.model, 'org/host-chat-7b', 'the public id is resolved to the host\'s model name');
  assert.deepEqual({ ...got, model: null }, { ...JSON.parse(raw), model: null });
  await assertInvariants(assert, gw, account);
});

test('with the upstream model name the client bytes pass through untouched', async (t) => {
  const up = await recordingUpstream(t);
  const gw = await startGateway(t, {
    store: 'pglite', upstreams: { host: { base_url: up.url } },
    models: [{ id: 'host-chat', upstream: 'host', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }],
  });
  const { key } = await gw.account('5');
  // Odd spacing would not survive a parse and re-serialisation: identical bytes prove there was no rewrite.
  const raw = `{ "messages":[{"role":"user","content":"Hello"}],  "model" : "host-chat",\n"x_vendor_hint": [1, {"deep": null}] }`;
  const r = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: raw });
  assert.equal(r.status, 200);
  await r.json();
  assert.equal(up.seen.at(-1).raw.toString('utf8'), raw, 'not one byte changed');
});

test('every accepted and unknown chat parameter reaches the upstream, and a stream gains only include_usage', async (t) => {
  const up = await recordingUpstream(t);
  const gw = await gatewayOn(t, up);
  const { key, account } = await gw.account('5');
  const plain = { model: 'host-chat-latest', messages: [{ role: 'user', content: 'Hello' }], ...PARAMS };
  let r = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: JSON.stringify(plain) });
  assert.equal(r.status, 200);
  await r.json();
  assert.deepEqual(JSON.parse(up.seen.at(-1).raw), { ...plain, model: 'org/host-chat-7b' });

  const streamed = { ...plain, stream: true, stream_options: { continuous_usage_stats: false } };
  r = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: JSON.stringify(streamed) });
  assert.equal(r.status, 200);
  const text = await r.text();
  assert.ok(!text.includes('"usage":{'), 'the client did not ask for usage, so it gets none');
  assert.deepEqual(JSON.parse(up.seen.at(-1).raw),
    { ...streamed, model: 'org/host-chat-7b', stream_options: { continuous_usage_stats: false, include_usage: true } });
  // Both calls billed from the host's usage: 11 in, 2 out each.
  const show = await gw.cli('account', 'show', account);
  assert.equal(dollarsToNano(show.balance), dollarsToNano('5') - 2n * priceNano(11, 2));
  await assertInvariants(assert, gw, account);
});

test('full keys never appear in the gateway logs, only their prefixes', async (t) => {
  const up = await recordingUpstream(t);
  const gw = await gatewayOn(t, up, { TOLLGATE_LOG_REQUESTS: '1' });
  const { key, prefix } = await gw.account('5');
  const other = await gw.account('0');
  const ok = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody({ model: 'host-chat' }) });
  assert.equal(ok.status, 200);
  await ok.text();
  const broke = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(other.key), body: chatBody({ model: 'host-chat' }) });
  assert.equal(broke.status, 402);
  await broke.text();
  const wrong = `${key.slice(0, -4)}zzzz`;
  const bad = await gw.fetch('/svc/v1/key', { headers: { 'xi-api-key': wrong } });
  assert.equal(bad.status, 401);
  await bad.text();
  await gw.cli('key', 'revoke', prefix);
  await new Promise((r) => setTimeout(r, 100));
  const logs = () => gw.output.stdout + gw.output.stderr;
  assert.ok(logs().includes(prefix), 'request lines name the key by its prefix');
  for (const k of [key, other.key, wrong]) {
    assert.ok(!logs().includes(k), 'a full key was logged');
    assert.ok(!logs().includes(k.slice(12)), 'the secret part of a key was logged');
  }
});

test('an unknown model close to an alias suggests the alias', async (t) => {
  const up = await recordingUpstream(t);
  const gw = await gatewayOn(t, up);
  const { key } = await gw.account('5');
  const r = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody({ model: 'host-chat-lates' }) });
  assert.equal(r.status, 404);
  const { error } = await r.json();
  assert.equal(error.code, 'model_not_found');
  assert.equal(error.message, 'The model `host-chat-lates` does not exist. Did you mean `host-chat-latest`?');
  assert.equal(up.seen.length, 0, 'nothing reached the host');
});

/** A host that serves the Responses API itself (like vLLM's /v1/responses): a Response, or its event stream. */
function responsesUpstream(t, { cutAfter = Infinity } = {}) {
  return recordingHost(t, async (body, res) => {
    const usage = { input_tokens: 9, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5,
      output_tokens_details: { reasoning_tokens: 2 }, total_tokens: 14 };
    const response = (status, output, u) => ({ id: 'resp_up', object: 'response', created_at: 1, status, model: body.model, output, usage: u });
    const message = { type: 'message', id: 'msg_1', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: 'Hi there!', annotations: [] }] };
    if (!body.stream) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(response('completed', [message], usage)));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    let seq = 0;
    const ev = (type, o) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...o })}\n\n`);
    ev('response.created', { response: response('in_progress', [], null) });
    const deltas = ['Hi', ' there', '!'];
    for (let i = 0; i < deltas.length; i++) {
      if (i >= cutAfter) { res.destroy(); return; }
      ev('response.output_text.delta', { item_id: 'msg_1', output_index: 0, content_index: 0, delta: deltas[i] });
      await new Promise((r) => setTimeout(r, 5));
    }
    ev('response.completed', { response: response('completed', [message], usage) });
    res.end();
  });
}

async function responsesGateway(t, up) {
  return startGateway(t, {
    store: 'pglite', upstreams: { host: { base_url: up.url, responses_api: true } },
    models: [{ id: 'host-chat', upstream: 'host', upstream_model: 'org/host-chat-7b', kind: 'chat',
      input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }],
  });
}

test('a host that serves /v1/responses gets the request passed through and its Response is billed from its usage', async (t) => {
  const up = await responsesUpstream(t);
  const gw = await responsesGateway(t, up);
  const { key, account } = await gw.account('5');
  const req = { model: 'host-chat', input: 'Hello', instructions: 'Be brief.', store: false, x_vendor_hint: { a: 1 } };
  const r = await gw.fetch('/v1/responses', { method: 'POST', headers: bearer(key), body: JSON.stringify(req) });
  assert.equal(r.status, 200);
  const body = await r.json();
  assert.equal(body.output[0].content[0].text, 'Hi there!');
  assert.equal(up.seen.at(-1).path, '/v1/responses');
  assert.deepEqual(JSON.parse(up.seen.at(-1).raw), { ...req, model: 'org/host-chat-7b' });
  const show = await gw.cli('account', 'show', account);
  assert.equal(dollarsToNano(show.balance), dollarsToNano('5') - priceNano(9, 5));
  await assertInvariants(assert, gw, account);
});

test('a streamed Response from such a host reaches the client event for event and is billed from response.completed', async (t) => {
  const up = await responsesUpstream(t);
  const gw = await responsesGateway(t, up);
  const { key, account } = await gw.account('5');
  const req = { model: 'host-chat', input: 'Hello', stream: true };
  const r = await gw.fetch('/v1/responses', { method: 'POST', headers: bearer(key), body: JSON.stringify(req) });
  assert.equal(r.status, 200);
  const text = await r.text();
  const events = text.split('\n\n').filter(Boolean);
  assert.deepEqual(events.map((e) => e.split('\n')[0]), ['event: response.created', 'event: response.output_text.delta',
    'event: response.output_text.delta', 'event: response.output_text.delta', 'event: response.completed']);
  assert.deepEqual(JSON.parse(up.seen.at(-1).raw), { ...req, model: 'org/host-chat-7b' }, 'no stream_options added');
  // response.completed carries the debit (9 in, 5 out: 15,200 nanodollars) as a plain JSON number.
  assert.match(events.at(-1), /"cost":0\.0000152\}/);
  assert.equal(JSON.parse(events.at(-1).slice(events.at(-1).indexOf('data: ') + 6)).response.usage.cost, 0.0000152);
  const show = await gw.cli('account', 'show', account);
  assert.equal(dollarsToNano(show.balance), dollarsToNano('5') - priceNano(9, 5));
  await assertInvariants(assert, gw, account);
});

test('a Responses stream the host cuts short is billed for the prompt and the deltas produced, and the client is cut too', async (t) => {
  const up = await responsesUpstream(t, { cutAfter: 2 });
  const gw = await responsesGateway(t, up);
  const { key, account } = await gw.account('5');
  const input = 'Hello';
  const r = await gw.fetch('/v1/responses', { method: 'POST', headers: bearer(key), body: JSON.stringify({ model: 'host-chat', input, stream: true }) });
  assert.equal(r.status, 200);
  await assert.rejects(r.text(), 'the client sees the stream end abruptly, not a clean finish');
  // No usage arrived: the prompt is counted (the input, JSON-encoded) and two output deltas were produced.
  const { countTokens } = await import('../dist/sim/index.js');
  const deadline = Date.now() + 2000;
  let show;
  do {
    show = await gw.cli('account', 'show', account);
    if (show.balance !== 5) break;
    await new Promise((res) => setTimeout(res, 50));
  } while (Date.now() < deadline);
  assert.equal(dollarsToNano(show.balance), dollarsToNano('5') - priceNano(countTokens(JSON.stringify(input)), 2));
  await assertInvariants(assert, gw, account);
});

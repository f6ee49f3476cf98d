// Chat completions through the gateway: pass-through, rejected parameters, streaming usage, disconnect billing, upstream faults.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, bearer, chatBody, assertInvariants, priceNano, dollarsToNano, balanceNano } from './helpers/gateway.mjs';
import { startSim } from '../dist/sim/index.js';
import { createServer } from 'node:http';
import { connect } from 'node:net';

const post = (gw, key, body, extra = {}, signal) =>
  gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), ...extra }, body, signal });

function events(text) {
  return text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
}

test('a streamed chat without include_usage gets no usage chunk but is billed from the upstream usage', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('2');
  const plain = await (await post(gw, key, chatBody({ seed: 7 }))).json();
  const res = await post(gw, key, chatBody({ seed: 7, stream: true }));
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /text\/event-stream/);
  const ev = events(await res.text());
  assert.equal(ev.at(-1), '[DONE]');
  const chunks = ev.slice(0, -1).map((e) => JSON.parse(e));
  assert.ok(chunks.every((c) => c.choices.length > 0), 'no usage-only chunk');
  assert.ok(chunks.every((c) => c.usage === undefined || c.usage === null), 'no running usage leaked');
  const text = chunks.map((c) => c.choices[0].delta.content ?? '').join('');
  assert.equal(text, plain.choices[0].message.content, 'same deterministic output as non-streamed');
  const expected = dollarsToNano('2') - 2n * priceNano(plain.usage.prompt_tokens, plain.usage.completion_tokens);
  assert.equal(await balanceNano(gw, account), expected);
  await assertInvariants(assert, gw, account);
});

test('a streamed chat with include_usage gets exactly one final usage chunk', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('2');
  const res = await post(gw, key, chatBody({ stream: true, stream_options: { include_usage: true } }));
  const ev = events(await res.text());
  const chunks = ev.slice(0, -1).map((e) => JSON.parse(e));
  const usageChunks = chunks.filter((c) => c.usage);
  assert.equal(usageChunks.length, 1);
  assert.deepEqual(usageChunks[0].choices, []);
  assert.equal(chunks.at(-1), usageChunks[0]);
  const u = usageChunks[0].usage;
  assert.equal(await balanceNano(gw, account), dollarsToNano('2') - priceNano(u.prompt_tokens, u.completion_tokens));
  await assertInvariants(assert, gw, account);
});

test('streamed chat is billed for the prompt and produced tokens when the client drops', async (t) => {
  const sim = await startSim();
  t.after(() => sim.close());
  const gw = await startGateway(t, { store: 'pglite', upstreams: { sim: { base_url: sim.url, continuous_usage_stats: false, forward_headers: ['x-sim-*'] } } });
  const { key, account } = await gw.account('2');
  const full = await (await post(gw, key, chatBody({ seed: 3, max_tokens: 60 }))).json();
  const afterFull = await balanceNano(gw, account);
  const ctl = new AbortController();
  const res = await post(gw, key, chatBody({ seed: 3, max_tokens: 60, stream: true }), { 'x-sim-token-delay-ms': '40' }, ctl.signal);
  const reader = res.body.getReader();
  let text = '';
  while ((text.match(/"content":"[^"]/g) ?? []).length < 5) text += Buffer.from((await reader.read()).value).toString();
  ctl.abort();
  const deadline = Date.now() + 3000;
  let now;
  do {
    await new Promise((r) => setTimeout(r, 100));
    now = await balanceNano(gw, account);
  } while (now === afterFull && Date.now() < deadline);
  const charged = afterFull - now;
  const promptOnly = priceNano(full.usage.prompt_tokens, 0);
  const complete = priceNano(full.usage.prompt_tokens, full.usage.completion_tokens);
  assert.ok(charged > promptOnly, `charged ${charged} covers the prompt and some output`);
  assert.ok(charged < complete, `charged ${charged} is less than the full completion ${complete}`);
  const produced = (charged - promptOnly) / 2500n;
  assert.ok(produced >= 5n && produced < BigInt(full.usage.completion_tokens), `${produced} tokens billed`);
  const stats = sim.stats();
  assert.equal(stats.abortedStreams, 1, 'the upstream generation was stopped');
  assert.equal(stats.activeStreams, 0);
  await assertInvariants(assert, gw, account);
});

test('a client that leaves before a buffered reply is billed for the whole reply the upstream goes on to produce', async (t) => {
  const sim = await startSim();
  t.after(() => sim.close());
  const gw = await startGateway(t, { store: 'pglite', upstreams: { sim: { base_url: sim.url, forward_headers: ['x-sim-*'] } } });
  const { key, account } = await gw.account('2');
  // The same request run to the end: what the upstream produces for it (the sim is deterministic).
  const full = await (await post(gw, key, chatBody({ seed: 11, max_tokens: 60 }))).json();
  const afterFull = await balanceNano(gw, account);
  const ctl = new AbortController();
  // 60 tokens at 40 ms: the sim answers after 2.4 s; the client leaves after 300 ms.
  const pending = post(gw, key, chatBody({ seed: 11, max_tokens: 60 }), { 'x-sim-token-delay-ms': '40' }, ctl.signal);
  setTimeout(() => ctl.abort(), 300);
  await assert.rejects(pending, { name: 'AbortError' });
  // The gateway counts the request as closed by the client (499) once the upstream has finished and it is billed.
  const closed = /^tollgate_requests_total\{route="chat.completions",status="499"\} 1$/m;
  const deadline = Date.now() + 8000;
  const metrics = async () => (await gw.fetch('/metrics')).text();
  let m = await metrics();
  while (!closed.test(m) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    m = await metrics();
  }
  assert.match(m, closed);
  assert.doesNotMatch(gw.output.stdout + gw.output.stderr, /upstream unreachable/, 'the client leaving is not an upstream fault');
  let now = await balanceNano(gw, account);
  while (now === afterFull && Date.now() < deadline) { await new Promise((r) => setTimeout(r, 50)); now = await balanceNano(gw, account); }
  assert.equal(afterFull - now, priceNano(full.usage.prompt_tokens, full.usage.completion_tokens), 'billed exactly the reply the upstream produced');
  await assertInvariants(assert, gw, account);
});

test('a dropped stream is billed from running usage when the upstream reports it (vLLM continuous_usage_stats)', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: { sim: { sim: { token_delay_ms: 30 } } } });
  const { key, account } = await gw.account('2');
  const ctl = new AbortController();
  const res = await post(gw, key, chatBody({ stream: true, max_tokens: 60 }), {}, ctl.signal);
  const reader = res.body.getReader();
  let text = '';
  while ((text.match(/"content":"[^"]/g) ?? []).length < 4) text += Buffer.from((await reader.read()).value).toString();
  assert.doesNotMatch(text, /"usage":\{/, 'running usage the client did not ask for is stripped');
  ctl.abort();
  const deadline = Date.now() + 3000;
  let bal;
  do { await new Promise((r) => setTimeout(r, 100)); bal = await balanceNano(gw, account); } while (bal === dollarsToNano('2') && Date.now() < deadline);
  assert.ok(bal < dollarsToNano('2'));
  await assertInvariants(assert, gw, account);
});

test('reasoning tokens are billed once, as part of completion tokens', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('1');
  const res = await post(gw, key, chatBody({ model: 'sim-reasoner' }));
  const body = await res.json();
  const u = body.usage;
  assert.ok(u.completion_tokens_details.reasoning_tokens > 0);
  assert.ok(u.completion_tokens > u.completion_tokens_details.reasoning_tokens);
  assert.equal(await balanceNano(gw, account), dollarsToNano('1') - priceNano(u.prompt_tokens, u.completion_tokens));
});

test('upstream failures are 502/504 in the envelope and bill nothing', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: { sim: { sim: {}, timeout_ms: 800 } } });
  const { key, account } = await gw.account('2');
  const cases = [
    [{ 'x-sim-fail-status': '500' }, 502, 'upstream_error'],
    [{ 'x-sim-fail-status': '503' }, 502, 'upstream_error'],
    [{ 'x-sim-malformed': '1' }, 502, 'upstream_malformed_response'],
    [{ 'x-sim-truncate-after': '3' }, 502, 'upstream_malformed_response'],
    [{ 'x-sim-hang': '1' }, 504, 'upstream_timeout'],
  ];
  for (const [headers, status, code] of cases) {
    const res = await post(gw, key, chatBody(), headers);
    assert.equal(res.status, status, JSON.stringify(headers));
    const body = await res.json();
    assert.equal(body.error.code, code);
    assert.doesNotMatch(body.error.message, /Traceback|sim/i);
  }
  assert.equal(await balanceNano(gw, account), dollarsToNano('2'));
  await assertInvariants(assert, gw, account);
});

test('rejected parameters are 400 unsupported_parameter naming the parameter, and bill nothing', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('1');
  const cases = {
    audio: { voice: 'alloy', format: 'wav' }, prediction: { type: 'content', content: 'x' }, web_search_options: {},
    functions: [{ name: 'f', parameters: {} }], function_call: 'auto', modalities: ['text', 'audio'],
  };
  for (const [param, value] of Object.entries(cases)) {
    const res = await post(gw, key, chatBody({ [param]: value }));
    assert.equal(res.status, 400, param);
    const { error } = await res.json();
    assert.equal(error.code, 'unsupported_parameter');
    assert.equal(error.param, param);
  }
  const text = await post(gw, key, chatBody({ modalities: ['text'], some_vendor_field: { x: 1 } }));
  assert.equal(text.status, 200, 'modalities ["text"] and unknown fields pass through');
  await text.json();
  await assertInvariants(assert, gw, account);
});

test('an unknown model is 404 model_not_found naming the nearest model', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('1');
  const res = await post(gw, key, chatBody({ model: 'sim-chatt' }));
  assert.equal(res.status, 404);
  const { error } = await res.json();
  assert.equal(error.code, 'model_not_found');
  assert.equal(error.param, 'model');
  assert.equal(error.message, 'The model `sim-chatt` does not exist. Did you mean `sim-chat`?');
  const alias = await post(gw, key, chatBody({ model: 'tollgate-27b' }));
  assert.equal(alias.status, 200, 'an alias resolves');
  assert.equal((await alias.json()).model, 'sim-chat');
});

test('a stream\'s status line and headers reach the client in one piece with its first event, not in a send of their own', async (t) => {
  // An upstream that answers with its headers at once and its first event 300 ms later (a model's prompt
  // processing): a gateway that sent the client its headers as soon as the upstream's came sent them on
  // their own, and uWS ends a streamed response's header block only at its first body bytes, so that send
  // was of no use to the client, a system call on each side for nothing.
  const chunk = (delta, finish = null) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm',
    choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const up = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    setTimeout(() => res.end(chunk({ role: 'assistant', content: 'Hi' }) + chunk({}, 'stop')
      + `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } })}\n\ndata: [DONE]\n\n`), 300);
  });
  await new Promise((r) => up.listen(0, '127.0.0.1', r));
  t.after(() => up.close());
  const gw = await startGateway(t, { store: 'pglite', upstreams: { sim: { base_url: `http://127.0.0.1:${up.address().port}` } } });
  const { key } = await gw.account('2');
  const { hostname, port } = new URL(gw.url);
  const body = chatBody({ max_tokens: 3, stream: true });
  const sock = connect(Number(port), hostname);
  t.after(() => sock.destroy());
  const reads = [];
  const done = new Promise((resolve) => {
    sock.on('data', (d) => { reads.push({ at: Date.now(), text: d.toString() }); if (reads.map((r) => r.text).join('').includes('data: [DONE]')) resolve(); });
  });
  const sent = Date.now();
  sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n`
    + `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  await done;
  const first = reads[0];
  assert.match(first.text, /^HTTP\/1\.1 200 OK\r\n/);
  const end = first.text.indexOf('\r\n\r\n');
  assert.ok(end > 0, `the first bytes the client got hold the whole header block: ${JSON.stringify(first.text)}`);
  assert.match(first.text.slice(end + 4), /data: \{/, 'and the first event with it');
  assert.ok(first.at - sent >= 250, `nothing came before the upstream's first event (the first bytes came ${first.at - sent} ms after the request)`);
});

// The status view (JSON and page), health and readiness, the overhead header and histogram, and OpenTelemetry traces to a local OTLP receiver.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { startGateway, TEST_MODELS, bearer, priceNano, dollarsToNano } from './helpers/gateway.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** An OpenAI-shaped chat upstream the test controls: it records each request's headers and answers 7 + 3 tokens. */
async function fakeUpstream(t) {
  const seen = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      seen.push({ url: req.url, headers: req.headers, body });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion', created: 1, model: 'fake-chat',
        choices: [{ index: 0, message: { role: 'assistant', content: 'Hello there.' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } }));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${server.address().port}`, seen };
}

/** A local OTLP/HTTP receiver: keeps every span POSTed to /v1/traces. */
async function otlpReceiver(t) {
  const spans = [];
  const posts = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      posts.push({ url: req.url, type: req.headers['content-type'], auth: req.headers.authorization });
      for (const rs of JSON.parse(body).resourceSpans) for (const ss of rs.scopeSpans) for (const s of ss.spans) spans.push({ ...s, resource: rs.resource });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${server.address().port}`, spans, posts };
}

const chat = (model) => JSON.stringify({ model, messages: [{ role: 'user', content: 'Say hello.' }] });
const FAKE = { id: 'fake-chat', upstream: 'fake', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 64 };
const DEAD = { id: 'dead-chat', upstream: 'dead', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 64 };

test('status reports each area from live traffic and dependency state, as JSON, as a page, and for load balancers', { timeout: 180_000 }, async (t) => {
  const up = await fakeUpstream(t);
  const gw = await startGateway(t, { store: 'pglite', upstreams: { sim: { sim: {} }, fake: { base_url: up.url }, dead: { base_url: 'http://127.0.0.1:1' } },
    models: [...TEST_MODELS, FAKE, DEAD], status: { last_reviewed: { billing: '2026-09-01' }, probe_ms: 200 } });
  const { key } = await gw.account('5');
  // Traffic: two successes, one server-side failure (the dead upstream), and caller mistakes that do not count.
  for (let i = 0; i < 2; i++) assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chat('fake-chat') })).status, 200);
  assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chat('dead-chat') })).status, 502);
  assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chat('no-such-model') })).status, 404);
  assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer('svc_live_notakeyatall'), body: chat('fake-chat') })).status, 401);
  await sleep(600); // a probe or two: the dead upstream is seen down

  const res = await gw.fetch('/svc/v1/status'); // public: no key
  assert.equal(res.status, 200);
  const s = await res.json();
  assert.equal(s.page.name, 'Tollgate');
  assert.match(s.page.url, /\/status$/);
  assert.ok(!Number.isNaN(Date.parse(s.page.updated_at)));
  const byId = Object.fromEntries(s.components.map((c) => [c.id, c]));
  for (const id of ['compatibility-alpha', 'compatibility-beta', 'authentication', 'billing-ledger', 'billing-payments', 'billing']) assert.ok(byId[id], `component ${id}`);
  for (const c of s.components) {
    assert.ok(['operational', 'degraded_performance', 'partial_outage', 'major_outage'].includes(c.status), c.status);
    assert.ok(!Number.isNaN(Date.parse(c.updated_at)));
  }
  assert.equal(byId['compatibility-alpha'].last_reviewed_at, '2026-08-25', 'the default review date');
  assert.equal(byId.authentication.last_reviewed_at, '2026-08-25');
  assert.equal(byId['billing-ledger'].last_reviewed_at, '2026-09-01', 'status.last_reviewed per area');
  const alpha = byId['compatibility-alpha'].availability;
  assert.deepEqual([alpha['5m'].successes, alpha['5m'].server_failures], [2, 1], '404 and 401 are not counted');
  assert.equal(alpha['5m'].availability, 2 / 3);
  assert.equal(alpha['1d'].successes, 2);
  assert.equal(byId['compatibility-alpha'].checks['upstream:dead'].state, 'down');
  assert.equal(byId['compatibility-alpha'].checks['upstream:fake'].state, 'up');
  assert.equal(byId['compatibility-alpha'].status, 'partial_outage', 'one of its upstreams is unreachable');
  assert.equal(byId['compatibility-beta'].status, 'operational', 'beta models do not use the dead upstream');
  assert.equal(byId['compatibility-beta'].availability['5m'].availability, null, 'no beta traffic');
  assert.equal(byId.authentication.availability['5m'].successes, 4, 'each keyed request whose key was known');
  assert.equal(byId['billing-payments'].status, 'operational', 'the sandbox is up');
  assert.deepEqual(s.status, { indicator: 'major', description: 'Partial System Outage' });
  assert.deepEqual(byId.billing.components, ['billing-ledger', 'billing-payments']);

  // The page a person reads.
  const page = await gw.fetch('/status');
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /text\/html/);
  const text = await page.text();
  assert.match(text, /data-component="compatibility-alpha"[\s\S]*Partial outage[\s\S]*66\.66%/);
  assert.match(text, /Billing: payments/);
  assert.match(text, /2026-09-01/);

  // Health for load balancers: an upstream down is a warning; readiness holds.
  const h = await gw.fetch('/healthz');
  assert.equal(h.status, 200);
  assert.equal(h.headers.get('content-type'), 'application/health+json');
  const hj = await h.json();
  assert.equal(hj.status, 'warn');
  assert.equal(hj.checks['upstream:dead'][0].status, 'fail');
  assert.equal(hj.checks['postgresql:connection'][0].status, 'pass');
  const ready = await gw.fetch('/readyz');
  assert.equal(ready.status, 200);
  assert.equal((await gw.fetch('/health')).status, 200, '/health keeps working');
});

test('the overhead header answers when asked, and the overhead histogram has route labels only', { timeout: 120_000 }, async (t) => {
  const up = await fakeUpstream(t);
  const gw = await startGateway(t, { store: 'pglite', upstreams: { sim: { sim: {} }, fake: { base_url: up.url } }, models: [...TEST_MODELS, FAKE] });
  const { key } = await gw.account('5');
  const asked = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'x-tollgate-timing': '1' }, body: chat('fake-chat') });
  assert.equal(asked.status, 200);
  const ms = asked.headers.get('x-tollgate-overhead-ms');
  assert.match(ms ?? '', /^\d+\.\d{3}$/);
  assert.ok(Number(ms) >= 0 && Number(ms) < 10_000);
  const streamed = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'x-tollgate-timing': '1' },
    body: JSON.stringify({ model: 'sim-chat', stream: true, messages: [{ role: 'user', content: 'hi' }] }) });
  assert.match(streamed.headers.get('x-tollgate-overhead-ms') ?? '', /^\d+\.\d{3}$/, 'a stream says it with its headers');
  await streamed.text();
  const plain = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chat('fake-chat') });
  assert.equal(plain.headers.get('x-tollgate-overhead-ms'), null, 'not asked, not sent');
  const m = await (await gw.fetch('/metrics')).text();
  const count = /^tollgate_gateway_overhead_ms_count\{route="chat\.completions"\} (\d+)$/m.exec(m);
  assert.ok(count && Number(count[1]) >= 3, 'three proxied chat requests observed');
  for (const line of m.split('\n').filter((l) => l.startsWith('tollgate_gateway_overhead_ms'))) {
    assert.doesNotMatch(line, /key|account/, 'no per-key labels');
  }
});

test('with telemetry configured, each request is a span with stage children, GenAI attributes and its cost, in the caller\'s trace', { timeout: 120_000 }, async (t) => {
  const up = await fakeUpstream(t);
  const otlp = await otlpReceiver(t);
  const gw = await startGateway(t, { store: 'pglite', upstreams: { sim: { sim: {} }, fake: { base_url: up.url } }, models: [...TEST_MODELS, FAKE],
    telemetry: { otlp_endpoint: otlp.url, service_name: 'tollgate-test', headers_env: 'TG_TEST_OTLP_HEADERS' }, env: { TG_TEST_OTLP_HEADERS: 'authorization=Bearer otlp-secret' } });
  const { key, account } = await gw.account('5');
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const parent = '00f067aa0ba902b7';
  const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), traceparent: `00-${traceId}-${parent}-01` }, body: chat('fake-chat') });
  assert.equal(res.status, 200);
  const body = await res.json();
  for (let i = 0; i < 50 && !otlp.spans.some((s) => s.kind === 2); i++) await sleep(100);
  assert.ok(otlp.posts.length > 0, 'spans were exported');
  assert.equal(otlp.posts[0].url, '/v1/traces');
  assert.equal(otlp.posts[0].type, 'application/json');
  assert.equal(otlp.posts[0].auth, 'Bearer otlp-secret', 'headers from headers_env');
  const attr = (s, k) => { const a = s.attributes.find((x) => x.key === k); return a && (a.value.stringValue ?? a.value.intValue ?? a.value.doubleValue ?? a.value.boolValue); };
  const server = otlp.spans.find((s) => s.kind === 2 && attr(s, 'http.route') === '/v1/chat/completions');
  assert.ok(server, 'a server span for the request');
  assert.equal(server.traceId, traceId, 'in the caller\'s trace');
  assert.equal(server.parentSpanId, parent, 'a child of the caller\'s span');
  assert.equal(attr(server, 'gen_ai.operation.name'), 'chat');
  assert.equal(attr(server, 'gen_ai.request.model'), 'fake-chat');
  assert.equal(Number(attr(server, 'gen_ai.usage.input_tokens')), body.usage.prompt_tokens);
  assert.equal(Number(attr(server, 'gen_ai.usage.output_tokens')), body.usage.completion_tokens);
  assert.equal(Number(attr(server, 'http.response.status_code')), 200);
  assert.equal(attr(server, 'tollgate.request_id'), res.headers.get('x-request-id'));
  const cost = priceNano(7, 3);
  assert.equal(BigInt(attr(server, 'tollgate.cost_nanodollars')), cost, 'the cost is the debit');
  const show = await gw.cli('account', 'show', account);
  assert.equal(dollarsToNano('5') - dollarsToNano(show.balance), cost, 'the account was debited that amount');
  assert.equal(server.resource.attributes.find((a) => a.key === 'service.name').value.stringValue, 'tollgate-test');
  const children = otlp.spans.filter((s) => s.parentSpanId === server.spanId);
  assert.deepEqual(children.map((c) => c.name).sort(), ['tollgate.admission', 'tollgate.auth', 'tollgate.settle', 'tollgate.upstream']);
  for (const c of children) {
    assert.equal(c.traceId, traceId);
    assert.ok(BigInt(c.startTimeUnixNano) >= BigInt(server.startTimeUnixNano) && BigInt(c.endTimeUnixNano) <= BigInt(server.endTimeUnixNano), `${c.name} inside the request`);
  }
  assert.ok(server.events.some((e) => e.name === 'tollgate.metered'));
  // The upstream got the trace context: this trace, the upstream span as its parent; and never the client's key.
  const upstreamSpan = children.find((c) => c.name === 'tollgate.upstream');
  assert.equal(upstreamSpan.kind, 3);
  assert.equal(up.seen.at(-1).headers.traceparent, `00-${traceId}-${upstreamSpan.spanId}-01`);
  assert.equal(up.seen.at(-1).headers.authorization, undefined);
});

test('with telemetry off, no span is made and an incoming traceparent reaches the upstream unchanged', { timeout: 120_000 }, async (t) => {
  const up = await fakeUpstream(t);
  const gw = await startGateway(t, { store: 'pglite', upstreams: { sim: { sim: {} }, fake: { base_url: up.url } }, models: [...TEST_MODELS, FAKE] });
  const { key } = await gw.account('5');
  const tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), traceparent: tp }, body: chat('fake-chat') })).status, 200);
  assert.equal(up.seen.at(-1).headers.traceparent, tp);
});

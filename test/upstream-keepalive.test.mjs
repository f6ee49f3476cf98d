// Pooled connections to an upstream: one idle for UPSTREAM_IDLE_MS is closed here, before uvicorn, llama.cpp and Node
// close theirs at 5 s (a request sent as the upstream closes fails after it was written, and is not retried); one in
// use has no idle timer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Upstreams, UPSTREAM_IDLE_MS } from '../dist/proxy/upstream.js';
import { embeddedConfig } from '../dist/config.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** An upstream that keeps idle connections a minute, counts the connections it accepts and those the client closed. */
async function upstream(t, handler) {
  const stats = { connections: 0, closedByClient: 0 };
  const server = http.createServer(handler);
  server.keepAliveTimeout = 60_000;
  server.on('connection', (socket) => { stats.connections++; socket.on('end', () => stats.closedByClient++); });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }));
  const base = embeddedConfig().upstreams.get('sim');
  const ups = new Upstreams(new Map([['u', { ...base, name: 'u', baseUrl: `http://127.0.0.1:${server.address().port}`, sim: undefined, timeoutMs: 30_000 }]]), new Map(), 1);
  t.after(() => ups.close());
  return { stats, ups };
}

async function body(ups) {
  const res = await ups.call('u', 'POST', '/v1/chat/completions', { 'content-type': 'application/json' }, Buffer.from('{}'), 'r').response;
  let text = '';
  for await (const c of res) text += c;
  return text;
}

test('a pooled upstream connection is reused while it is fresh, and closed here once idle for UPSTREAM_IDLE_MS', async (t) => {
  const { stats, ups } = await upstream(t, (req, res) => { req.resume(); req.on('end', () => res.end('ok')); });
  assert.equal(await body(ups), 'ok');
  assert.equal(await body(ups), 'ok');
  assert.equal(stats.connections, 1, 'the second request reused the first connection');
  await sleep(UPSTREAM_IDLE_MS + 700);
  assert.equal(stats.closedByClient, 1, 'the idle connection was closed by the gateway, before the upstream would');
  assert.equal(await body(ups), 'ok');
  assert.equal(stats.connections, 2, 'the next request opened a new connection');
});

test('a connection in use has no idle timer: a reply that pauses longer than UPSTREAM_IDLE_MS mid-body completes', async (t) => {
  const { stats, ups } = await upstream(t, (req, res) => {
    req.resume();
    req.on('end', () => { res.write('first '); setTimeout(() => res.end('last'), UPSTREAM_IDLE_MS + 500); });
  });
  assert.equal(await body(ups), 'first last');
  // Reused, then paused again on the reused connection: its idle timer was cleared when it was taken from the pool.
  assert.equal(await body(ups), 'first last');
  assert.equal(stats.connections, 1);
  assert.equal(stats.closedByClient, 0);
});

// Upstream protection across instances (issue 27, "Upstream protection"): two gateways on one PostgreSQL and one Redis
// hold an upstream's max_concurrency and rpm together, share its Retry-After pause, and a kill -9'd one's slots come back.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { startGateway, freshDatabase, clearRedisPrefix, bearer, priceNano, balanceNano, assertInvariants, REDIS_URL } from './helpers/gateway.mjs';
import { privateRedis } from './helpers/stores.mjs';
import { startRedisCluster } from './helpers/redis-cluster.mjs';
import { Pools } from '../dist/proxy/pool.js';
import { RedisUpstreamLimits } from '../dist/proxy/shared-limits.js';
import { embeddedConfig } from '../dist/config.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const chat = (id, upstream) => ({ id, upstream, upstream_model: 'sim-chat', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 });
const up = (url, extra = {}) => ({ base_url: url, ...extra, health: { probe_interval_ms: 0, eject_after: 1000 } });
const USAGE = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };

/**
 * A small OpenAI-shaped upstream that counts: `inFlight` now, `most` at once, `seen` requests. It answers
 * a chat after `delayMs`; `stub.mode = 'hold'` holds every request until the client goes,
 * `stub.mode = {status, headers}` answers that error at once.
 */
async function countingUpstream(t, delayMs = 300) {
  const stub = { inFlight: 0, most: 0, seen: 0, times: [], mode: 'answer' };
  const server = http.createServer((req, res) => {
    req.resume();
    req.once('end', () => {
      if (req.url === '/v1/models') { res.writeHead(200, { 'content-type': 'application/json' }).end('{"object":"list","data":[]}'); return; }
      stub.seen++; stub.times.push(Date.now());
      if (typeof stub.mode === 'object') {
        res.writeHead(stub.mode.status, { 'content-type': 'application/json', ...stub.mode.headers });
        res.end(JSON.stringify({ error: { message: 'slow down', type: 'rate_limit_error', code: null } }));
        return;
      }
      stub.inFlight++; stub.most = Math.max(stub.most, stub.inFlight);
      let done = false;
      const end = () => { if (!done) { done = true; stub.inFlight--; } };
      res.once('close', end);
      if (stub.mode === 'hold') return;
      setTimeout(() => {
        end();
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'sim-chat',
          choices: [{ index: 0, message: { role: 'assistant', content: 'Hello there' }, finish_reason: 'stop' }], usage: USAGE }));
      }, delayMs);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  stub.url = `http://127.0.0.1:${server.address().port}`;
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }));
  return stub;
}

/** Two gateways on one fresh PostgreSQL database and the shared Redis under one new key prefix. */
async function twoInstances(t, upstreams, models) {
  const db = await freshDatabase();
  const prefix = `tgprotect:${randomBytes(4).toString('hex')}:`;
  const a = await startGateway(t, { store: 'postgres', database: db, redis: true, redisPrefix: prefix, upstreams, models });
  const b = await startGateway(t, { store: 'postgres', database: db, redis: true, redisPrefix: prefix, upstreams, models });
  // Registered after the gateways' own stops, so it runs after them: a gateway that stops gives its spare holds
  // back, which writes the account's hold total again (cleared before, it was left in the shared Redis).
  t.after(async () => { await clearRedisPrefix(prefix); await db.drop(); });
  return { a, b, db, prefix };
}

function post(gw, key, model = 'm') {
  return gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }) });
}

async function settled(...gws) {
  for (let i = 0; i < 100; i++) {
    let pending = 0;
    for (const gw of gws) pending += Number(/^tollgate_pending_debits (\d+)/m.exec(await (await gw.fetch('/metrics')).text())?.[1] ?? 0);
    if (pending === 0) return;
    await sleep(100);
  }
  throw new Error('debits still pending');
}

test('max_concurrency 2 holds across two instances: 8 concurrent requests, the upstream never sees more than 2, the surplus waits or gets 503 upstream_busy with Retry-After, billed nothing', { timeout: 120_000 }, async (t) => {
  // 8 requests of 1 s on 2 slots need 4 s; each waits at most 1.2 s: some are served after waiting, the rest refused.
  const stub = await countingUpstream(t, 1000);
  const { a, b } = await twoInstances(t, { counted: up(stub.url, { max_concurrency: 2, queue_ms: 1200, queue_size: 8 }) }, [chat('m', 'counted')]);
  const { key, account } = await a.account('5');
  const before = await balanceNano(a, account);
  const replies = await Promise.all(Array.from({ length: 8 }, (_, i) => post(i % 2 === 0 ? a : b, key).then(async (r) => ({ status: r.status, retryAfter: r.headers.get('retry-after'), body: await r.json() }))));
  const served = replies.filter((r) => r.status === 200);
  const busy = replies.filter((r) => r.status !== 200);
  t.diagnostic(`statuses ${replies.map((r) => r.status).join(',')}; most in flight at the upstream ${stub.most}`);
  assert.ok(stub.most <= 2, `the upstream had ${stub.most} requests in flight at once`);
  assert.ok(served.length >= 4, 'requests waited in the queue and were served as slots freed');
  assert.ok(busy.length >= 1, 'past queue_ms the surplus is refused');
  for (const r of busy) {
    assert.equal(r.status, 503);
    assert.equal(r.body.error.code, 'upstream_busy');
    assert.ok(Number(r.retryAfter) >= 1, 'Retry-After is set');
  }
  assert.equal(stub.seen, served.length, 'a refused request never reached the upstream');
  await settled(a, b);
  assert.equal(before - await balanceNano(a, account), BigInt(served.length) * priceNano(USAGE.prompt_tokens, USAGE.completion_tokens), 'only the served requests are billed');
  await assertInvariants(assert, a, account);
});

test('rpm holds across two instances: an upstream with rpm 3 is sent 3 requests in the minute, whichever instance asks', { timeout: 120_000 }, async (t) => {
  const stub = await countingUpstream(t, 5);
  const { a, b } = await twoInstances(t, { counted: up(stub.url, { rpm: 3, queue_ms: 0 }) }, [chat('m', 'counted')]);
  const { key, account } = await a.account('5');
  const statuses = [];
  let retryAfter;
  for (let i = 0; i < 6; i++) {
    const r = await post(i % 2 === 0 ? a : b, key);
    statuses.push(r.status);
    const j = await r.json();
    if (r.status === 503) { assert.equal(j.error.code, 'upstream_busy'); retryAfter = Number(r.headers.get('retry-after')); }
  }
  assert.deepEqual(statuses, [200, 200, 200, 503, 503, 503]);
  assert.equal(stub.seen, 3, 'the upstream was sent 3 requests in the minute');
  assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter} is when the oldest start leaves the minute`);
  await settled(a, b);
  await assertInvariants(assert, a, account);
});

test('a 429 with Retry-After seen by one instance pauses the upstream on the other', { timeout: 120_000 }, async (t) => {
  const stub = await countingUpstream(t, 5);
  // No max_concurrency or rpm: the pause reaches the other instance all the same.
  const { a, b } = await twoInstances(t, { counted: up(stub.url, { queue_ms: 500 }) }, [chat('m', 'counted')]);
  const { key, account } = await a.account('5');
  stub.mode = { status: 429, headers: { 'retry-after': '4' } };
  const first = await post(a, key);
  assert.notEqual(first.status, 200, 'the upstream refused it');
  await first.arrayBuffer();
  assert.equal(stub.seen, 1);
  stub.mode = 'answer';
  await sleep(300);
  const other = await post(b, key);
  const j = await other.json();
  assert.equal(other.status, 503, 'the other instance does not send it on while the upstream is paused');
  assert.equal(j.error.code, 'upstream_busy');
  assert.ok(Number(other.headers.get('retry-after')) >= 3, `Retry-After ${other.headers.get('retry-after')} is what is left of the pause`);
  assert.equal(stub.seen, 1, 'the paused upstream saw nothing more');
  await sleep(4000);
  assert.equal((await post(b, key).then(async (r) => { await r.arrayBuffer(); return r.status; })), 200, 'after the pause it is sent requests again');
  await settled(a, b);
  await assertInvariants(assert, a, account);
});

test('an instance killed -9 holding slots: its slots come back to the other within the lease bound (5 s)', { timeout: 120_000 }, async (t) => {
  const stub = await countingUpstream(t, 50);
  const { a, b } = await twoInstances(t, { counted: up(stub.url, { max_concurrency: 2, queue_ms: 15_000 }) }, [chat('m', 'counted')]);
  const { key } = await a.account('5');
  stub.mode = 'hold';
  const held = [post(a, key).catch(() => null), post(a, key).catch(() => null)];
  for (let i = 0; i < 50 && stub.inFlight < 2; i++) await sleep(50);
  assert.equal(stub.inFlight, 2, 'instance a holds both slots');
  stub.mode = 'answer';
  a.proc.kill('SIGKILL');
  const killedAt = Date.now();
  await Promise.all(held);
  const r = await post(b, key);
  assert.equal(r.status, 200);
  await r.arrayBuffer();
  const reachedAfter = stub.times.at(-1) - killedAt;
  t.diagnostic(`b's request reached the upstream ${reachedAfter} ms after the kill`);
  assert.ok(reachedAfter >= 2000, `it waited for the dead instance's leases (${reachedAfter} ms)`);
  assert.ok(reachedAfter <= 6500, `the slots came back within the bound (${reachedAfter} ms)`);
});

// In process: two `Pools` on one Redis prefix stand for two instances (the pick, the poll, the fail-open rule).
const entry = (name, priority = 0) => ({ name, weight: 1, priority, upstreamModel: 'm' });
function configs(extra) {
  const base = embeddedConfig().upstreams.get('sim');
  return new Map(Object.entries(extra).map(([name, o]) => [name, { ...base, name, health: { ...base.health, probeIntervalMs: 0 }, ...o }]));
}
async function twoPools(t, cfgs, url = REDIS_URL) {
  const prefix = `tgprotect:${randomBytes(4).toString('hex')}:`;
  const la = new RedisUpstreamLimits(url, prefix);
  const lb = new RedisUpstreamLimits(url, prefix);
  t.after(async () => { await la.close(); await lb.close(); if (url === REDIS_URL) await clearRedisPrefix(prefix); });
  await Promise.all([la.ready(), lb.ready()]);
  return { pa: new Pools(cfgs, Date.now, la), pb: new Pools(cfgs, Date.now, lb), la, lb, prefix };
}
const acquire = (pools, pool, queueUntil = Infinity) => pools.acquire(pool, new Set(), queueUntil, () => false);

test('a waiter on one instance gets the slot freed on another within the poll bound, and a full shared upstream spills to the next of the pool at once', { timeout: 60_000 }, async (t) => {
  const { pa, pb } = await twoPools(t, configs({ one: { maxConcurrency: 1, queueMs: 5000 }, spare: {} }));
  const held = await acquire(pa, [entry('one')]);
  // The pool of two: `one` is full on the other instance, so `spare` takes it without waiting.
  let t0 = Date.now();
  const spilled = await acquire(pb, [entry('one'), entry('spare', 1)]);
  assert.equal(spilled.entry.name, 'spare');
  assert.ok(Date.now() - t0 < 1000, 'no wait for the full upstream');
  spilled.release();
  // Alone, it waits; a's release frees the slot and b's next poll takes it.
  t0 = Date.now();
  const waiting = acquire(pb, [entry('one')]);
  await sleep(400);
  const freedAt = Date.now();
  held.release();
  const got = await waiting;
  assert.equal(got.entry.name, 'one');
  assert.ok(freedAt - t0 >= 390, 'it waited while the other instance held the slot');
  assert.ok(Date.now() - freedAt < 400, `it got the slot ${Date.now() - freedAt} ms after the other instance freed it`);
  got.release();
});

test('an upstream with no max_concurrency or rpm never touches Redis on the request path; one with a limit costs one call to take and one to release', { timeout: 60_000 }, async (t) => {
  const { pa, la } = await twoPools(t, configs({ free: {}, capped: { maxConcurrency: 4 } }));
  for (let i = 0; i < 200; i++) (await acquire(pa, [entry('free')])).release();
  assert.equal(la.calls, 0, 'no Redis call for an unlimited upstream');
  for (let i = 0; i < 10; i++) (await acquire(pa, [entry('capped')])).release();
  assert.equal(la.calls, 20);
});

test('Redis unreachable: an upstream\'s limits fall back to each instance\'s own (counted in fail-open), and are shared again once Redis is back', { timeout: 60_000 }, async (t) => {
  const redis = await privateRedis(t);
  const { pa, pb } = await twoPools(t, configs({ one: { maxConcurrency: 1, queueMs: 0 } }), redis.url);
  const shared = await acquire(pa, [entry('one')]);
  await assert.rejects(acquire(pb, [entry('one')]), (e) => e.code === 'upstream_busy', 'shared while Redis is up');
  shared.release();
  await sleep(200); // the release reaches Redis (else its lease lives out its 5 s)
  redis.kill();
  await sleep(300);
  const a1 = await acquire(pa, [entry('one')]);
  const b1 = await acquire(pb, [entry('one')]);
  assert.deepEqual([a1.entry.name, b1.entry.name], ['one', 'one'], 'each instance lets one through on its own limit');
  await assert.rejects(acquire(pa, [entry('one')]), (e) => e.code === 'upstream_busy', "this instance's own max_concurrency still holds");
  assert.equal(pa.health()[0].failOpen, 1);
  a1.release(); b1.release();
  await redis.start();
  let back = false;
  // Once both are connected again, a slot taken on one is refused on the other.
  for (let i = 0; i < 100 && !back; i++) {
    await sleep(100);
    const before = pa.health()[0].failOpen + pb.health()[0].failOpen;
    const l = await acquire(pa, [entry('one')]);
    const other = await acquire(pb, [entry('one')]).catch((e) => e);
    if (pa.health()[0].failOpen + pb.health()[0].failOpen === before) {
      back = true;
      assert.equal(other.code, 'upstream_busy', 'shared again');
    } else if (!(other instanceof Error)) other.release();
    l.release();
  }
  assert.ok(back, 'Redis came back');
});

test('on a Redis Cluster, each upstream\'s limits are one slot\'s: a slot taken on one instance is refused on the other, and a pause one learns reaches the other', { timeout: 120_000 }, async (t) => {
  const cluster = await startRedisCluster();
  t.after(() => cluster.stop());
  // Three upstreams, so their {upstream:<name>} tags land on more than one master.
  const names = ['u1', 'u2', 'u3'];
  const { pa, pb } = await twoPools(t, configs(Object.fromEntries(names.map((n) => [n, { maxConcurrency: 1, rpm: 100, queueMs: 0 }]))), cluster.url);
  for (const n of names) {
    const held = await acquire(pa, [entry(n)]);
    await assert.rejects(acquire(pb, [entry(n)]), (e) => e.code === 'upstream_busy', `${n} is full on the other instance`);
    held.release();
    // The release reaches Redis a round trip later: the other instance gets the slot once it has.
    let again;
    for (let i = 0; i < 100 && !again; i++) {
      await sleep(50);
      again = await acquire(pb, [entry(n)]).catch((e) => { if (e.code === 'upstream_busy') return undefined; throw e; });
    }
    assert.ok(again, `${n} is free on the other instance once released`);
    again.release();
  }
  assert.deepEqual([pa.health(), pb.health()].flat().map((u) => u.failOpen), [0, 0, 0, 0, 0, 0], 'every script answered');
  const l = await acquire(pa, [entry('u1')]);
  l.pause(3000);
  l.release();
  await sleep(300);
  await assert.rejects(acquire(pb, [entry('u1')]), (e) => e.code === 'upstream_busy' && Number(e.headers['retry-after']) >= 2, 'paused on the other instance too');
});

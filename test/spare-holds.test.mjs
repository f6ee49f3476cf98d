// Spare holds (issue 29, gate/spares.ts): with Redis, after a request of a key far from every limit, the
// instance admits the key's next request ahead, between the two, so that request's admission costs no
// round trip on its path. A spare is a hold like any other (money, slot, rpm token, seen by every
// instance); one nobody takes within 2 s is given back with its rpm token. Redis is a private one, so that
// pausing it (CLIENT PAUSE) holds no other test up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, freshDatabase, bearer, chatBody, assertInvariants, priceNano, balanceNano, dollarsToNano } from './helpers/gateway.mjs';
import { privateRedis } from './helpers/stores.mjs';
import { chatRecorder as upstream, RECORDER_TOKENS } from './helpers/stub-upstream.mjs';
import { Redis } from '../node_modules/ioredis/built/index.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const MODELS = [{ id: 'm', upstream: 'up', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }];
const say = (extra = {}) => chatBody({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra });
const post = (gw, key, body = say()) => gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body });
const EACH = priceNano(RECORDER_TOKENS.prompt, RECORDER_TOKENS.output);

async function counts(gw) {
  const m = await (await gw.fetch('/metrics')).text();
  const n = (name, o) => Number(new RegExp(`^${name}\\{outcome="${o}"\\} (\\d+)`, 'm').exec(m)?.[1] ?? NaN);
  return { placed: n('tollgate_spare_holds_total', 'placed'), used: n('tollgate_spare_holds_total', 'used'), returned: n('tollgate_spare_holds_total', 'returned'),
    overlapped: n('tollgate_admission_overlap_total', 'admitted') };
}

async function until(what, f, ms = 5_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** The account's holds in Redis (each spare and request in flight is one) and what they hold. */
async function held(redisUrl, account) {
  const r = new Redis(redisUrl);
  try {
    const [n, total] = await Promise.all([r.hlen(`tg:{${account}}:holds`), r.hget(`tg:{${account}}:holdsum`, 'total')]);
    return { holds: n, total: BigInt(total ?? 0) };
  } finally { r.disconnect(); }
}

/**
 * The account's holds once nothing it has served is still to be settled in Redis's hash: a request's hold leaves the
 * hash when its settle is applied, by the next script on the account (at the latest the commit record, after its
 * debit's group commit), not when its reply is sent. A hold still there after 5 s (a spare) is what it reads.
 */
async function settledHolds(redisUrl, account) {
  const end = Date.now() + 5_000;
  for (;;) {
    const h = await held(redisUrl, account);
    if ((h.holds === 0 && h.total === 0n) || Date.now() > end) return h;
    await sleep(20);
  }
}

async function gateway(t, redis, up, limits = {}) {
  return startGateway(t, { store: 'postgres', redis: true, redisUrl: redis.url, redisPrefix: 'tg:', upstreams: { up: { base_url: up.url } }, models: MODELS, limits });
}

/** A gateway on a private Redis, an account with $10 and a key, one request served, and the spare its end placed. */
async function withSpare(t, body = say()) {
  const redis = await privateRedis(t);
  const up = await upstream(t);
  const gw = await gateway(t, redis, up);
  const { key, account, prefix } = await gw.account('10');
  assert.equal((await post(gw, key, body)).status, 200);
  await until('the spare', async () => (await counts(gw)).placed === 1);
  return { redis, up, gw, key, account, prefix };
}

test('one request at a time: each after the first takes the spare hold its predecessor placed, so its upstream call starts with Redis paused; every one is billed exactly, and the last spare goes back unused', async (t) => {
  // The spare is placed once the first request ended: a hold in Redis with no request in flight.
  const { redis, up, gw, key, account } = await withSpare(t);
  const spare = await held(redis.url, account);
  assert.equal(spare.holds, 1, 'the spare is a hold in Redis, seen by every instance');
  assert.ok(spare.total > 0n, 'holding the worst case of the request that placed it');
  // Redis paused for 600 ms: the request's admission is already made, so the upstream has it at once.
  const c = new Redis(redis.url);
  await c.call('CLIENT', 'PAUSE', '600', 'ALL');
  c.disconnect();
  const before = up.seen.length;
  const sent = Date.now();
  const res = await post(gw, key);
  assert.equal(res.status, 200);
  assert.ok(up.seen[before].at - sent < 300, `the upstream had it ${up.seen[before].at - sent} ms after it was sent, Redis paused`);
  assert.equal(res.headers.get('x-ratelimit-limit-requests'), '600', 'it carries the rate-limit headers of its admission');
  assert.ok(Number(res.headers.get('x-ratelimit-remaining-requests')) >= 590);
  await res.arrayBuffer();
  // A spare is placed once the request before has settled, beside the reply: a client a few hundred µs behind takes it.
  for (let i = 0; i < 3; i++) {
    await until('the next spare', async () => (await counts(gw)).placed === 2 + i);
    assert.equal((await post(gw, key)).status, 200);
  }
  const seen = await counts(gw);
  assert.equal(seen.used, 4, 'requests 2 to 5 each took a spare');
  assert.equal(seen.overlapped, 0, 'none needed an admission beside its upstream call');
  assert.equal(await balanceNano(gw, account), dollarsToNano('10') - 5n * EACH, 'each billed exactly');
  // The spares left after the fifth (one, or a few if the key took them fast enough to be topped up several at a time) are given back 2 s later, with nothing held.
  await until('the last spares given back', async () => (await held(redis.url, account)).holds === 0, 4_000);
  const end = await counts(gw);
  assert.equal(end.returned, end.placed - end.used, 'every spare not taken was given back');
  assert.deepEqual(await held(redis.url, account), { holds: 0, total: 0n });
  await assertInvariants(assert, gw, account);
});

test('requests in flight together: each that ends places a spare, up to the key\'s depth (an eighth of its concurrency, so 4 at the default 32, 1 at 8), and as many that follow take one each with Redis paused', async (t) => {
  const redis = await privateRedis(t);
  const up = await upstream(t);
  const gw = await gateway(t, redis, up);
  const burst = (key, n) => Promise.all(Array.from({ length: n }, () => post(gw, key).then(async (r) => { await r.arrayBuffer(); return r.status; })));
  const wide = await gw.account('10');
  const narrow = await gw.account('10', { concurrency: 8 });
  for (const a of [narrow, wide]) {
    assert.equal((await post(gw, a.key)).status, 200); // the key seen: its next requests are far from every limit
    await sleep(100);
    assert.deepEqual(await burst(a.key, 6), [200, 200, 200, 200, 200, 200]);
  }
  await until('the pools', async () => (await held(redis.url, wide.account)).holds === 4 && (await held(redis.url, narrow.account)).holds === 1);
  await sleep(200);
  assert.equal((await held(redis.url, wide.account)).holds, 4, 'six ended together: four spares for a key allowed 32 in flight, no more');
  assert.equal((await held(redis.url, narrow.account)).holds, 1, 'one for a key allowed 8');
  // Redis paused: four requests of the wide key at once each take a spare, so the upstream has all four at once.
  const c = new Redis(redis.url);
  await c.call('CLIENT', 'PAUSE', '600', 'ALL');
  c.disconnect();
  const before = up.seen.length;
  const sent = Date.now();
  const four = burst(wide.key, 4);
  await until('four upstream calls', async () => up.seen.length - before >= 4, 2_000);
  const late = Math.max(...up.seen.slice(before, before + 4).map((s) => s.at - sent));
  assert.ok(late < 300, `the upstream had all four ${late} ms after they were sent, Redis paused`);
  assert.deepEqual(await four, [200, 200, 200, 200]);
  // Every spare unused is given back 2 s later, and every request was billed once.
  await until('every spare given back', async () => (await held(redis.url, wide.account)).holds === 0 && (await held(redis.url, narrow.account)).holds === 0, 8_000);
  assert.equal(await balanceNano(gw, wide.account), dollarsToNano('10') - 11n * EACH);
  assert.equal(await balanceNano(gw, narrow.account), dollarsToNano('10') - 7n * EACH);
  await assertInvariants(assert, gw, wide.account);
  await assertInvariants(assert, gw, narrow.account);
});

test('a key whose spares go fast is topped up several at a time, so its requests cost Redis fewer script calls than one admission each', async (t) => {
  const redis = await privateRedis(t);
  const up = await upstream(t);
  const gw = await gateway(t, redis, up);
  const { key, account } = await gw.account('10', { concurrency: 64 }); // a depth of 8
  for (let i = 0; i < 20; i++) assert.equal((await post(gw, key)).status, 200); // its pace seen
  const r = new Redis(redis.url);
  t.after(() => r.disconnect());
  const calls = async () => {
    const info = await r.info('commandstats');
    return [...info.matchAll(/^cmdstat_(fcall|evalsha|eval):calls=(\d+)/gm)].reduce((n, m) => n + Number(m[2]), 0);
  };
  const before = await calls();
  const N = 60;
  for (let i = 0; i < N; i++) assert.equal((await post(gw, key)).status, 200);
  const scripts = (await calls()) - before;
  const { used } = await counts(gw);
  assert.ok(used >= 70, `most requests took a spare (${used} of 80)`);
  // Each request's settle is one script call; admission, one per request before, now places up to 8 spares a call.
  assert.ok(scripts < N * 1.6, `${scripts} script calls for ${N} requests`);
  await until('every spare given back', async () => (await held(redis.url, account)).holds === 0, 8_000);
  assert.equal(await balanceNano(gw, account), dollarsToNano('10') - 80n * EACH);
  await assertInvariants(assert, gw, account);
});

test('a spare admits only what it covers, under the key\'s limits as they are: a larger request, or one after the key\'s rpm changed, is admitted by Redis; spare_holds false places none', async (t) => {
  const { redis, up, gw, key, account, prefix } = await withSpare(t, say({ max_tokens: 16 }));
  // Its worst case (16 tokens out) does not cover 1,000: Redis admits that one; the spare stays.
  assert.equal((await post(gw, key, say({ max_tokens: 1000 }))).status, 200);
  assert.equal((await counts(gw)).used, 0);
  assert.equal((await post(gw, key, say({ max_tokens: 16 }))).status, 200);
  assert.equal((await counts(gw)).used, 1, 'a request it covers takes it');
  await until('the next spare', async () => (await counts(gw)).placed >= 2);
  // The key's rpm lowered: the spare, admitted under 600, is given back and the request goes to Redis.
  await gw.cli('key', 'limits', prefix, '--rpm', '300');
  await sleep(1_500); // the change feed
  const res = await post(gw, key, say({ max_tokens: 16 }));
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-ratelimit-limit-requests'), '300');
  const after = await counts(gw);
  assert.equal(after.used, 1, 'not taken under the old limits');
  assert.ok(after.returned >= 1, 'given back');
  assert.equal(await balanceNano(gw, account), dollarsToNano('10') - 4n * EACH);
  // Off: nothing placed, nothing counted.
  const off = await gateway(t, redis, up, { spare_holds: false });
  const o = await off.account('10');
  for (let i = 0; i < 3; i++) assert.equal((await post(off, o.key)).status, 200);
  assert.doesNotMatch(await (await off.fetch('/metrics')).text(), /tollgate_spare_holds_total/);
  assert.deepEqual(await settledHolds(redis.url, o.account), { holds: 0, total: 0n });
  await assertInvariants(assert, gw, account);
});

test('no spare near a limit: a balance within 100 worst cases, a key allowed fewer than 8 requests in flight, a key with a token limit', async (t) => {
  const redis = await privateRedis(t);
  const up = await upstream(t);
  const gw = await gateway(t, redis, up);
  for (const [credit, opts] of [['0.5', {}], ['10', { concurrency: 4 }], ['10', { tpm: 1_000_000 }]]) {
    const { key, account } = await gw.account(credit, opts);
    for (let i = 0; i < 3; i++) assert.equal((await post(gw, key)).status, 200);
    assert.deepEqual(await settledHolds(redis.url, account), { holds: 0, total: 0n }, JSON.stringify(opts));
  }
  assert.equal((await counts(gw)).placed, 0);
});

test('a graceful stop gives every spare back: nothing is left held in Redis', async (t) => {
  const { redis, gw, account } = await withSpare(t);
  assert.equal((await held(redis.url, account)).holds, 1);
  await gw.stop();
  assert.deepEqual(await held(redis.url, account), { holds: 0, total: 0n });
});

test('a spare of an instance killed with kill -9 is dropped by the takeover, billing nothing', async (t) => {
  const redis = await privateRedis(t);
  const up = await upstream(t);
  const db = await freshDatabase();
  t.after(() => db.drop());
  const o = { store: 'postgres', database: db, redis: true, redisUrl: redis.url, redisPrefix: 'tg:', upstreams: { up: { base_url: up.url } }, models: MODELS };
  const a = await startGateway(t, o);
  const b = await startGateway(t, o);
  const { key, account } = await a.account('10');
  assert.equal((await post(a, key)).status, 200);
  await until('the spare', async () => (await counts(a)).placed === 1);
  assert.equal((await held(redis.url, account)).holds, 1);
  a.proc.kill('SIGKILL');
  await a.exited;
  // B sees A's heartbeat stop (5 s) and takes its holds over: the spare had no request, so nothing is billed.
  // The request's debit may still have been pending in Redis when A died (its group commit starts after the
  // response, not with it): B commits it then, and the account's total comes back to nothing held or pending.
  await until('the takeover', async () => { const h = await held(redis.url, account); return h.holds === 0 && h.total === 0n; }, 15_000);
  assert.deepEqual(await held(redis.url, account), { holds: 0, total: 0n });
  assert.equal(await balanceNano(b, account), dollarsToNano('10') - EACH, 'the one request served, and nothing for the spare');
  await assertInvariants(assert, b, account);
});

test('Redis lost: no spare is taken, so the key\'s next request fails closed (503) as any admission does; once Redis is back, spares are placed again', async (t) => {
  const { redis, gw, key, account } = await withSpare(t);
  redis.kill();
  await sleep(300);
  const res = await post(gw, key);
  assert.equal(res.status, 503);
  assert.equal((await res.json()).error.code, 'limits_unavailable');
  assert.equal((await counts(gw)).used, 0, 'the spare admitted before the loss was not used');
  await redis.start();
  let back = 0;
  for (let i = 0; i < 50 && back !== 200; i++) { back = (await post(gw, key)).status; if (back !== 200) await sleep(200); }
  assert.equal(back, 200);
  await until('a spare again', async () => (await counts(gw)).placed === 2);
  assert.equal(await balanceNano(gw, account), dollarsToNano('10') - 2n * EACH, 'the two served, billed once each');
});

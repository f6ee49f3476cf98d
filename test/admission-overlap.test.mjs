// The admission round trip off the critical path (issue 29): far from every limit, the upstream call starts
// while Redis places the hold; near one it waits; refused after the call started, the call is abandoned and
// nothing is billed. Redis is a private one, so that pausing it (CLIENT PAUSE) holds no other test up (and it
// goes with the test: its keys are not cleared one by one, so the gateways are given a fixed prefix).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startGateway, freshDatabase, clearRedisPrefix, bearer, chatBody, assertInvariants, priceNano, balanceNano, dollarsToNano } from './helpers/gateway.mjs';
import { privateRedis } from './helpers/stores.mjs';
import { chatRecorder as upstream, RECORDER_TOKENS } from './helpers/stub-upstream.mjs';
import { Redis } from '../node_modules/ioredis/built/index.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const MODELS = [{ id: 'm', upstream: 'up', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }];
const say = (content) => chatBody({ model: 'm', messages: [{ role: 'user', content }] });
const post = (gw, key, body) => gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body });

async function overlapCounts(gw) {
  const m = await (await gw.fetch('/metrics')).text();
  const n = (o) => Number(new RegExp(`^tollgate_admission_overlap_total\\{outcome="${o}"\\} (\\d+)`, 'm').exec(m)?.[1] ?? NaN);
  return { admitted: n('admitted'), refused: n('refused') };
}

/** Pauses every client of the Redis for `ms` (CLIENT PAUSE ... ALL): an admission placed meanwhile waits that long. */
async function pauseRedis(url, ms) {
  const r = new Redis(url);
  await r.call('CLIENT', 'PAUSE', String(ms), 'ALL');
  r.disconnect(); // not QUIT: that is a command too, and would itself wait out the pause
}

/** Sends one request while Redis is paused for 600 ms: when the upstream saw it and when the reply came, from the send. */
async function timedThroughPause(gw, redisUrl, up, key, body = say('hi')) {
  await pauseRedis(redisUrl, 600);
  const before = up.seen.length;
  const sent = Date.now();
  const res = await post(gw, key, body);
  const json = await res.json();
  const took = Date.now() - sent;
  const arrived = up.seen[before] ? up.seen[before].at - sent : null;
  return { res, json, took, arrived };
}

test('far from every limit, the upstream call starts while Redis places the hold; the reply waits for the admission and is billed exactly', async (t) => {
  const redis = await privateRedis(t);
  const up = await upstream(t);
  // Without spare holds: a key's next request would take the one its last request placed (test/spare-holds.test.mjs).
  const gw = await startGateway(t, { store: 'postgres', redis: true, redisUrl: redis.url, redisPrefix: 'tg:', upstreams: { up: { base_url: up.url } }, models: MODELS, limits: { spare_holds: false } });
  const { key, account } = await gw.account('10');
  // The first request of a key waits: this instance has not seen the key's limits yet.
  const first = await timedThroughPause(gw, redis.url, up, key);
  assert.equal(first.res.status, 200);
  assert.ok(first.arrived >= 450, `a key never admitted here waits for Redis before the upstream call (arrived after ${first.arrived} ms)`);
  // The second: the view says far (a $10 balance, 599 of 600 rpm left, nothing in flight): the call goes at once.
  const second = await timedThroughPause(gw, redis.url, up, key);
  assert.equal(second.res.status, 200);
  assert.ok(second.arrived < 300, `the upstream had the request ${second.arrived} ms after it was sent, while Redis was paused`);
  assert.ok(second.took >= 450, `the reply waited for the admission (${second.took} ms)`);
  assert.deepEqual(await overlapCounts(gw), { admitted: 1, refused: 0 });
  const each = priceNano(RECORDER_TOKENS.prompt, RECORDER_TOKENS.output);
  assert.equal(await balanceNano(gw, account), dollarsToNano('10') - 2n * each);
  await assertInvariants(assert, gw, account);
});

test('near a limit the upstream call waits for the admission: a balance within 100 worst cases, a key with a token limit, overlap_admission off', async (t) => {
  const redis = await privateRedis(t);
  const up = await upstream(t);
  const gw = await startGateway(t, { store: 'postgres', redis: true, redisUrl: redis.url, redisPrefix: 'tg:', upstreams: { up: { base_url: up.url } }, models: MODELS });
  // The worst case of a request is its body's bytes in and 4,096 tokens out: about $0.01, so $0.50 is within 100 of them.
  const small = await gw.account('0.5');
  const tpm = await gw.account('10', { tpm: 1_000_000 });
  for (const { key } of [small, tpm]) {
    assert.equal((await post(gw, key, say('hi'))).status, 200); // seen once
    const r = await timedThroughPause(gw, redis.url, up, key);
    assert.equal(r.res.status, 200);
    assert.ok(r.arrived >= 450, `waited for Redis (arrived after ${r.arrived} ms)`);
  }
  assert.deepEqual(await overlapCounts(gw), { admitted: 0, refused: 0 });
  const off = await startGateway(t, { store: 'postgres', redis: true, redisUrl: redis.url, redisPrefix: 'tg:', upstreams: { up: { base_url: up.url } }, models: MODELS, limits: { overlap_admission: false } });
  const { key } = await off.account('10');
  assert.equal((await post(off, key, say('hi'))).status, 200);
  const r = await timedThroughPause(off, redis.url, up, key);
  assert.equal(r.res.status, 200);
  assert.ok(r.arrived >= 450, `overlap_admission false: waited (arrived after ${r.arrived} ms)`);
  assert.doesNotMatch(await (await off.fetch('/metrics')).text(), /tollgate_admission_overlap_total/);
  await assertInvariants(assert, gw, small.account);
  await assertInvariants(assert, gw, tpm.account);
});

test('refused after its call started (another instance took the key\'s concurrency): the call is abandoned, the client gets the 429, nothing is billed', async (t) => {
  const up = await upstream(t);
  const db = await freshDatabase();
  t.after(() => db.drop());
  const redisPrefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  t.after(() => clearRedisPrefix(redisPrefix)); // a shared prefix is the test's to clear, as in crash.test.mjs
  const o = { store: 'postgres', database: db, redis: true, redisPrefix, upstreams: { up: { base_url: up.url } }, models: MODELS };
  const a = await startGateway(t, o);
  const b = await startGateway(t, o);
  const { key, account } = await a.account('10', { concurrency: 2 });
  assert.equal((await post(a, key, say('hi'))).status, 200); // seen on A: nothing in flight there, 599 of 600 rpm left
  const before = await balanceNano(a, account);
  // B holds both of the key's slots with two requests the upstream never answers.
  const ctl = new AbortController();
  const hanging = [1, 2].map(() => b.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: say('hang'), signal: ctl.signal }).catch((e) => e));
  const until = Date.now() + 10_000;
  while (up.seen.length < 3 && Date.now() < until) await sleep(20);
  assert.equal(up.seen.length, 3, 'both hanging requests reached the upstream');
  // A's view says far (it holds none of the two): the call starts, then Redis refuses it.
  const res = await post(a, key, say('slow'));
  assert.equal(res.status, 429);
  assert.equal((await res.json()).error.code, 'concurrency_limit_exceeded');
  assert.equal(up.seen.length, 4, 'the upstream had the request: its call started before the admission answered');
  const until2 = Date.now() + 2000;
  while (!up.seen[3].closedEarly && Date.now() < until2) await sleep(20);
  assert.equal(up.seen[3].closedEarly, true, 'the abandoned call\'s socket was closed before the upstream answered');
  assert.equal(up.seen[3].answered, false);
  assert.deepEqual(await overlapCounts(a), { admitted: 0, refused: 1 });
  ctl.abort();
  await Promise.all(hanging);
  assert.equal(await balanceNano(a, account), before, 'nothing billed for the refused request (the hanging ones produced nothing)');
  await assertInvariants(assert, a, account);
});

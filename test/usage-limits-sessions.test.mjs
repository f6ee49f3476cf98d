// Per-key usage limits on sessions: each stream-input generation reserves its characters when it begins, so
// concurrent sessions (on one instance, or on two sharing Redis) cannot together speak past chars_per_min.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startGateway, freshDatabase, clearRedisPrefix, assertInvariants, balanceNano, TEST_MODELS, REDIS_URL } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';
import { MemoryLimiter } from '../dist/gate/limits/memory.js';
import { RedisLimiter } from '../dist/gate/limits/redis.js';

const MODELS = TEST_MODELS.some((m) => m.kind === 'tts') ? TEST_MODELS
  : [...TEST_MODELS, { id: 'sim-tts', upstream: 'sim', kind: 'tts', simulated: true, per_mchar: '15' }];
const VOICE = 'JBFqnCBsd6RMkjVDRZzb';
/** sim-tts: $15 per million characters = 15,000 nanodollars a character. */
const PER_CHAR = 15_000n;
const LIMIT = 100;
const CHUNK = 'Forty characters of text are said here. ';

/** One stream-input session sending three generations of 40 characters (slowed, so the two sessions overlap), then its end; resolves at its close. */
async function session(gw, key) {
  const url = `${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${VOICE}/stream-input?output_format=pcm_16000&model_id=sim-tts`;
  const s = await connect(url, { 'xi-api-key': key, 'x-sim-token-delay-ms': '20' });
  assert.ok(s.ws, `upgraded: ${JSON.stringify(s.refused)}`);
  for (const f of [{ text: ' ' }, { text: CHUNK, flush: true }, { text: CHUNK, flush: true }, { text: CHUNK, flush: true }, { text: '' }]) s.ws.send(JSON.stringify(f));
  const close = await s.closed;
  return { ...close, frames: s.frames };
}

/**
 * Two sessions at once, each asking for 120 characters under a 100-a-minute limit: the generations that
 * began reserved 40 each, so a third does not fit; its session is told the 429 (characters, what it was
 * billed) and closed with 1008. What was billed stays within the limit plus the minute's refill.
 */
async function twoSessions(gws, account, key) {
  const before = await balanceNano(gws[0], account);
  const started = Date.now();
  const results = await Promise.all([session(gws[0], key), session(gws[gws.length - 1], key)]);
  const elapsed = Date.now() - started;
  const billed = (before - await balanceNano(gws[0], account)) / PER_CHAR;
  const refill = BigInt(Math.ceil(LIMIT * elapsed / 60_000));
  // Each generation used exactly what it reserved (its characters), so nothing may pass the limit and its refill.
  assert.ok(billed <= BigInt(LIMIT) + refill, `billed ${billed} characters <= ${LIMIT} + ${refill} refill (6 x 40 asked)`);
  const refused = results.filter((r) => r.code === 1008);
  assert.ok(refused.length >= 1, `a session was refused: ${results.map((r) => `${r.code} ${r.reason}`)}`);
  for (const r of refused) {
    const told = r.frames.find((f) => f.error === 'rate_limit_exceeded');
    assert.ok(told, `told why: ${r.reason} ${JSON.stringify(r.frames.filter((f) => !f.audio))}`);
    assert.equal(told.code, 1008);
    assert.match(told.message, new RegExp(`on characters per min: Limit ${LIMIT}, Used \\d+, Requested 40\\. Please try again in`));
    assert.match(told.message, /This session was billed \$[\d.]+ \(\d+ nd\) in all\./, 'what the session was billed');
  }
  assert.ok(billed >= 80n, `the two generations that fit were spoken and billed (${billed})`);
  await assertInvariants(assert, gws[0], account);
}

test('two stream-input sessions on one instance (in-process limits) cannot together speak past the key\'s characters per minute', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', models: MODELS });
  const { key, account } = await gw.account('5', { charsPerMin: LIMIT });
  await twoSessions([gw], account, key);
});

test('two instances on one Redis and one PostgreSQL: their stream-input sessions share the key\'s characters per minute', async (t) => {
  const db = await freshDatabase();
  const redisPrefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  t.after(async () => { await db.drop(); await clearRedisPrefix(redisPrefix); });
  const opts = { database: db, redis: true, redisPrefix, models: MODELS };
  const gws = [await startGateway(t, opts), await startGateway(t, opts)];
  const { key, account } = await gws[0].account('5', { charsPerMin: LIMIT });
  await twoSessions(gws, account, key);
});

const NOW = new Date().toISOString().slice(0, 7) + '-01';
const money = { balance: { amount: 1_000_000n, version: 1n }, ceiling: null, spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs: 60_000 };
const chars = (need) => [{ dim: 'c', limit: 60_000, need }];
const debit = (id) => ({ id, accountId: 'acct_s', keyId: 'key_s', amount: 1n,
  entry: JSON.stringify({ idemKey: id, nonce: 'n', accountId: 'acct_s', keyId: 'key_s', kind: 'debit', amount: '1', reason: 'test', at: new Date().toISOString() }) });

test('a session part reserves its worst case on the session\'s hold: refused with nothing taken, given back at its end (its use taken) or with the hold (memory and Redis)', async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const redis = new RedisLimiter(REDIS_URL, prefix);
  await redis.ready();
  t.after(async () => { await redis.close().catch(() => undefined); await clearRedisPrefix(prefix); });
  for (const l of [new MemoryLimiter(), redis]) {
    // 60,000 characters a minute (one a millisecond comes back): the figures are checked within a margin.
    const open = await l.admit({ holdId: 's1', accountId: 'acct_s', keyId: 'key_s', rpm: 1_000, concurrency: 10, money: true, hold: 1n, ...money });
    assert.equal(open.ok, true);
    const extend = (holdId, need, rpm) => l.extend({ holdId, accountId: 'acct_s', keyId: 'key_s', amount: 1n, ...money, ...(rpm ? { rpm } : {}), quotas: chars(need) });
    assert.deepEqual(await extend('s1', 40_000), { ok: true }, l.kind);
    const no = await extend('s1', 40_000, 1_000);
    assert.equal(no.ok, false, `${l.kind}: a second part does not fit while the first is reserved`);
    assert.equal(no.reason, 'quota_exceeded');
    assert.equal(no.quota.dim, 'c');
    assert.ok(no.retryMs > 19_000 && no.retryMs <= 20_000, `${l.kind}: retry when 20,000 more have come back (${no.retryMs} ms)`);
    // The first part used 1,000 of its 40,000: its reservation comes back and the 1,000 are taken.
    await l.settle('s1', debit('s1#1'), false, 1n, chars(1_000), chars(40_000));
    assert.deepEqual(await extend('s1', 58_000), { ok: true }, `${l.kind}: the part's unused reservation came back`);
    assert.equal((await extend('s1', 2_000)).ok, false, `${l.kind}: 1,000 used + 58,000 reserved leave about 1,000`);
    // A part that billed nothing gives its reservation back with the shrink.
    await l.shrink('acct_s', 's1', 1n, chars(58_000));
    assert.deepEqual(await extend('s1', 50_000), { ok: true }, `${l.kind}: the shrink gave the reservation back`);
    // The session ends with that part open: releasing the hold gives back what it still reserved.
    await l.release('acct_s', 's1');
    const next = await l.admit({ holdId: 's2', accountId: 'acct_s', keyId: 'key_s', rpm: 1_000, concurrency: 10, money: true, hold: 1n, ...money, quotas: chars(58_000) });
    assert.equal(next.ok, true, `${l.kind}: nothing of the released session stays reserved`);
    await l.release('acct_s', 's2');
    await l.committed('acct_s', ['s1#1'], { balance: null, spends: [] });
  }
});

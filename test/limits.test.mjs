// The limiter contract, on both limiters: holds and pending debits count against the balance until
// released or committed, the newest committed balance wins across instances, and nothing durable is
// lost when an owner dies (Redis: another instance takes over; in process: the journal replays).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryLimiter } from '../dist/gate/limits/memory.js';
import { RedisLimiter, DEAD_AFTER_MS, FUNCTIONS_LIBRARY } from '../dist/gate/limits/redis.js';
import { DebitJournal } from '../dist/ledger/journal.js';
import { clearRedisPrefix } from './helpers/gateway.mjs';
import { Redis } from '../node_modules/ioredis/built/index.js';

const REDIS = process.env.TOLLGATE_TEST_REDIS ?? 'redis://127.0.0.1:6379';

async function redisLimiter(t, prefix = `tgtest:${randomBytes(5).toString('hex')}:`) {
  const redis = new RedisLimiter(REDIS, prefix);
  await redis.ready();
  t.after(async () => { await redis.close().catch(() => undefined); await clearRedisPrefix(prefix); });
  return redis;
}

async function limiters(t) {
  return [new MemoryLimiter(), await redisLimiter(t)];
}

const NOW = new Date().toISOString().slice(0, 7) + '-01';

const admit = (l, accountId, holdId, hold, balance, o = {}) => l.admit({
  holdId, accountId, keyId: o.keyId ?? `key_${accountId}`, rpm: 1_000_000, concurrency: o.concurrency ?? 1_000, money: o.money ?? true, hold,
  balance: { amount: balance, version: o.version ?? 1n }, ceiling: o.ceiling ?? null,
  spent: { period: 'month', start: NOW, amount: o.spent ?? 0n, version: o.spentVersion ?? 1n }, ttlMs: o.ttlMs ?? 60_000, cover: o.cover,
});

/** What `l` takes over once a dead owner's silence counts (DEAD_AFTER_MS): its claimOrphans, asked every 250 ms until it hands on something, or [] after 4 s more. */
async function takenOver(l) {
  const deadline = Date.now() + DEAD_AFTER_MS + 4_000;
  let got = [];
  while (got.length === 0 && Date.now() < deadline) { await new Promise((r) => setTimeout(r, 250)); got = await l.claimOrphans(); }
  return got;
}

const debit = (accountId, id, amount, keyId = `key_${accountId}`) => ({
  id, accountId, keyId, amount,
  entry: JSON.stringify({ idemKey: id, nonce: 'n', accountId, keyId, kind: 'debit', amount: String(amount), reason: 'test', at: new Date().toISOString() }),
});

test('holds take the balance until released, and a turn of releases over two accounts frees all of it', async (t) => {
  for (const l of await limiters(t)) {
    const balance = 10n * 1_000n;
    for (const acct of ['a', 'b']) {
      for (let i = 0; i < 10; i++) assert.equal((await admit(l, acct, `${acct}${i}`, 1_000n, balance)).ok, true, `${l.kind}: hold ${acct}${i}`);
      const full = await admit(l, acct, `${acct}-over`, 1_000n, balance);
      assert.deepEqual(full, { ok: false, reason: 'insufficient_balance', available: 0n }, `${l.kind}: the holds use up the balance`);
    }
    // All twenty released in one turn, interleaved across the accounts.
    await Promise.all(Array.from({ length: 20 }, (_, i) => l.release(i % 2 ? 'b' : 'a', `${i % 2 ? 'b' : 'a'}${i >> 1}`)));
    for (const acct of ['a', 'b']) {
      assert.equal(await l.openHolds(acct), 0, `${l.kind}: no hold left on ${acct}`);
      for (let i = 0; i < 10; i++) assert.equal((await admit(l, acct, `${acct}again${i}`, 1_000n, balance)).ok, true, `${l.kind}: balance free again`);
    }
  }
});

test('releasing a hold twice, or one that never existed, takes nothing off the others', async (t) => {
  for (const l of await limiters(t)) {
    for (let i = 0; i < 3; i++) assert.equal((await admit(l, 'c', `c${i}`, 1_000n, 3_000n)).ok, true);
    await Promise.all([l.release('c', 'c0'), l.release('c', 'c0'), l.release('c', 'never')]);
    assert.equal(await l.openHolds('c'), 2, `${l.kind}: two holds still open`);
    // 2,000 of 3,000 still held: one more 1,000 hold fits, and a second does not.
    assert.equal((await admit(l, 'c', 'c3', 1_000n, 3_000n)).ok, true, `${l.kind}: the released 1,000 is free`);
    assert.equal((await admit(l, 'c', 'c4', 1_000n, 3_000n)).ok, false, `${l.kind}: nothing more than that was freed`);
  }
});

test('a settled debit counts against the balance at its actual amount until it is committed, then the committed balance does', async (t) => {
  for (const l of await limiters(t)) {
    // Balance 3,000: a 2,500 hold settles at 2,000 actual; 1,000 is left while the debit is pending.
    assert.equal((await admit(l, 'd', 'd0', 2_500n, 3_000n)).ok, true);
    await l.settle('d0', debit('d', 'd0', 2_000n), true);
    assert.equal(await l.openHolds('d'), 0, `${l.kind}: the hold is gone once settled`);
    assert.equal((await admit(l, 'd', 'd1', 999n, 3_000n)).ok, true, `${l.kind}: 1,000 is free while 2,000 is pending`);
    await l.release('d', 'd1');
    assert.equal((await admit(l, 'd', 'd2', 1n, 3_000n, { money: true })).ok, true);
    await l.release('d', 'd2');
    // With 1,000 of headroom, an instance that still believes the old balance of 3,000 is refused once
    // 1,000 more is held.
    assert.equal((await admit(l, 'd', 'd3', 1_000n, 3_000n)).ok, true);
    assert.equal((await admit(l, 'd', 'd4', 1n, 3_000n)).ok, false, `${l.kind}: pending + held use the balance up`);
    await l.release('d', 'd3');
    // Committed: the ledger's balance (1,000, version 2) replaces the pending 2,000.
    await l.committed('d', ['d0'], { balance: { amount: 1_000n, version: 2n }, spends: [] });
    assert.equal((await admit(l, 'd', 'd5', 1_000n, 3_000n, { version: 1n })).ok, true, `${l.kind}: the committed balance is read, not the stale one`);
    assert.equal((await admit(l, 'd', 'd6', 1n, 3_000n, { version: 1n })).ok, false, `${l.kind}: and it is 1,000, all held now`);
  }
});

test('a commit record clears each pending debit it names once (an id named twice, an unknown id, a zero debit among them) and leaves no counter behind', async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const l = await redisLimiter(t, prefix);
  const sumOf = () => l.redis.hgetall(`${prefix}{g}:holdsum`);
  // Three debits of two keys pending, and a fourth hold still open.
  for (const [id, key, hold, amount] of [['g0', 'k1', 2_000n, 1_500n], ['g1', 'k2', 2_000n, 700n], ['g2', 'k1', 500n, 0n]]) {
    assert.equal((await admit(l, 'g', id, hold, 100_000n, { keyId: key })).ok, true);
    await l.settle(id, debit('g', id, amount, key), true);
  }
  assert.equal((await admit(l, 'g', 'g3', 300n, 100_000n, { keyId: 'k2' })).ok, true);
  const before = await sumOf();
  assert.equal(before.pending, '2200');
  assert.equal(before.total, '2500', 'pending 2,200 and held 300');
  // Committed in one turn: g0 named twice, g1, g2 (a zero debit) and an id this Redis never saw.
  await Promise.all([
    l.committed('g', ['g0', 'nope', 'g0'], { balance: { amount: 97_800n, version: 2n }, spends: [] }),
    l.committed('g', ['g1', 'g2'], { balance: null, spends: [] }),
  ]);
  const after = await sumOf();
  assert.equal(await l.redis.hlen(`${prefix}{g}:pend`), 0, 'no pending record is left');
  assert.equal(after.total, '300', 'only the open hold is counted: each debit came off once');
  assert.equal(after['a:k2'], '300');
  for (const f of ['pending', 'p:k1', 'p:k2', 'a:k1']) assert.equal(after[f], undefined, `${f} is removed at 0`);
  assert.equal(after.bal, '97800');
  // What is left for the account: the committed balance less the open hold.
  assert.deepEqual(await admit(l, 'g', 'g4', 97_501n, 97_800n, { version: 2n, cover: true, keyId: 'k2' }),
    { ok: false, reason: 'insufficient_balance', available: 97_500n });
});

test('the account hash\'s counters stay exact whatever their size: amounts of up to 15 digits and of 19 (past 2^53), moved in one call and in several, and each field at 0 removed (Redis)', async (t) => {
  // The scripts add a call's moves of a counter in Lua, where a number is exact only to 2^53: a move of
  // more digits must still land to the nanodollar (measured build: written with HINCRBY at once).
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const l = await redisLimiter(t, prefix);
  // Read as the next script on the account sees it: a settle's bookkeeping is applied by that script (here openHolds').
  const sumOf = async () => { await l.openHolds('x'); return l.redis.hgetall(`${prefix}{x}:holdsum`); };
  const big = 10n ** 19n;
  const holds = [['x0', 'k1', 999_999_999_999_999n], ['x1', 'k1', 1_152_921_504_606_846_977n], ['x2', 'k2', 123n], ['x3', 'k2', 3_000_000_000_000_000_003n]];
  // Two admitted one at a time, two in one turn.
  for (const [id, key, hold] of holds.slice(0, 2)) assert.equal((await admit(l, 'x', id, hold, big, { keyId: key })).ok, true);
  const turn = await Promise.all(holds.slice(2).map(([id, key, hold]) => admit(l, 'x', id, hold, big, { keyId: key })));
  assert.ok(turn.every((o) => o.ok));
  const held = await sumOf();
  const sum = (xs) => xs.reduce((a, b) => a + b, 0n);
  assert.equal(held.total, String(sum(holds.map((h) => h[2]))));
  assert.equal(held['a:k1'], String(holds[0][2] + holds[1][2]));
  assert.equal(held['a:k2'], String(holds[2][2] + holds[3][2]));
  assert.equal(held['n:k1'], '2');
  // Settled at amounts of every size: two in one turn, then two one at a time (the third moves only
  // small amounts on fields of 19 digits).
  const amounts = [999_999_999_999_998n, 1_152_921_504_606_846_975n, 7n, 2_999_999_999_999_999_999n];
  await Promise.all([0, 1].map((i) => l.settle(holds[i][0], debit('x', holds[i][0], amounts[i], holds[i][1]), true)));
  for (const i of [2, 3]) {
    await l.settle(holds[i][0], debit('x', holds[i][0], amounts[i], holds[i][1]), true);
    const now = await sumOf();
    assert.equal(now.total, String(sum(amounts.slice(0, i + 1)) + sum(holds.slice(i + 1).map((h) => h[2]))), `after settling ${holds[i][0]}`);
  }
  const settled = await sumOf();
  assert.equal(settled.total, String(sum(amounts)), 'the holds came off and the debits went on, to the nanodollar');
  assert.equal(settled.pending, String(sum(amounts)));
  assert.equal(settled['p:k1'], String(amounts[0] + amounts[1]));
  assert.equal(settled['a:k2'], String(amounts[2] + amounts[3]));
  for (const f of ['n:k1', 'n:k2']) assert.equal(settled[f], undefined, `${f} is removed when no request of the key is in flight`);
  assert.deepEqual(await l.pendingOf('x', 'k2'), { account: sum(amounts), key: amounts[2] + amounts[3] });
  await l.committed('x', holds.map((h) => h[0]), { balance: null, spends: [] });
  const after = await sumOf();
  assert.equal(after.total, '0');
  for (const f of ['pending', 'p:k1', 'p:k2', 'a:k1', 'a:k2']) assert.equal(after[f], undefined, `${f} is removed at 0`);
});

test('an account\'s records in Redis expire when idle (the request bucket too), and the sum hash never before the hold records it counts (Redis)', async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const l = await redisLimiter(t, prefix);
  const key = (k) => `${prefix}{e}:${k}`;
  const ttl = async (k) => l.redis.pttl(key(k));
  const near = (ms, want, what) => assert.ok(ms > want - 5_000 && ms <= want, `${what}: ${ms} ms left, ${want} expected`);
  const at = (id, ttlMs) => l.admit({ holdId: id, accountId: 'e', keyId: 'k', rpm: 1e6, concurrency: 100, money: true, hold: 1_000n,
    balance: { amount: 10n ** 9n, version: 1n }, ceiling: null, spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs });
  // A hold of 60 s: its records are kept an hour past it (a dead owner's running records wait that long to
  // be billed); the sum hash too, with nothing pending.
  const HOUR = 3_600_000;
  assert.equal((await at('e0', 60_000)).ok, true);
  for (const k of ['holds', 'holdexp', 'holdsum']) near(await ttl(k), 60_000 + HOUR, k);
  near(await ttl('rpm:k'), 120_000, 'the key\'s request bucket (two minutes: an idle minute refills it)');
  assert.equal((await at('e1', 60_000)).ok, true);
  // A debit pending: the sum hash has no expiry until it is committed, then five minutes and never less than the holds' (here more).
  await l.settle('e0', debit('e', 'e0', 700n, 'k'), true);
  await l.openHolds('e'); // the settle's bookkeeping, applied by the next script on the account
  assert.equal(await ttl('holdsum'), -1, 'no expiry while a debit is pending');
  await l.committed('e', ['e0'], { balance: null, spends: [] });
  near(await ttl('holdsum'), 60_000 + HOUR, 'holdsum once committed');
  // The last hold gone, the hash is gone; the next admission makes it again, with its expiry.
  await l.release('e', 'e1');
  assert.equal(await ttl('holds'), -2);
  assert.equal((await at('e2', 60_000)).ok, true);
  for (const k of ['holds', 'holdexp']) near(await ttl(k), 60_000 + HOUR, `${k} made again`);
  // A longer hold than any before raises the records' expiry at once, and a commit then keeps the sum
  // hash as long as the hold records, not five minutes.
  assert.equal((await at('e3', 400_000)).ok, true);
  for (const k of ['holds', 'holdexp']) near(await ttl(k), 400_000 + HOUR, `${k} after a longer hold`);
  await l.settle('e2', debit('e', 'e2', 300n, 'k'), true);
  await l.committed('e', ['e2'], { balance: null, spends: [] });
  const sumLeft = await ttl('holdsum');
  const holdsLeft = await ttl('holds');
  assert.ok(sumLeft >= holdsLeft && holdsLeft > 400_000 + HOUR - 5_000, `the sum hash (${sumLeft} ms) outlives the open hold's records (${holdsLeft} ms)`);
  // The last hold settled and committed: no record left to count, and the sum hash has five idle minutes again.
  await l.settle('e3', debit('e', 'e3', 200n, 'k'), true);
  await l.committed('e', ['e3'], { balance: null, spends: [] });
  assert.equal(await ttl('holds'), -2);
  near(await ttl('holdsum'), 300_000, 'holdsum once no hold is left');
});

test('a session\'s hold, extended, keeps its records (and its usage reservation) in Redis an hour past its new deadline, and a shorter hold placed after never shortens them (Redis)', async (t) => {
  // A realtime session outlives its admission: before, the records kept the admission's expiry, so a
  // session running over the hold's life plus the margin (then a minute) with no other request of the
  // account found its hold gone ("This session lost its hold; reconnect").
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const l = await redisLimiter(t, prefix);
  const ttl = async (k) => l.redis.pttl(`${prefix}{s}:${k}`);
  const near = (ms, want, what) => assert.ok(ms > want - 1_000 && ms <= want, `${what}: ${ms} ms left, ${want} expected`);
  const base = { accountId: 's', keyId: 'k', balance: { amount: 10n ** 9n, version: 1n }, ceiling: null, spent: { period: 'month', start: NOW, amount: 0n, version: 1n } };
  // Admitted with a reservation under a tokens-per-minute limit (its record in resv gives it back when the hold is dropped).
  assert.equal((await l.admit({ ...base, holdId: 'sess', rpm: 1e6, concurrency: 100, money: true, hold: 1_000n, ttlMs: 60_000, quotas: [{ dim: 't', limit: 100_000, need: 500 }] })).ok, true);
  const HOUR = 3_600_000;
  for (const k of ['holds', 'holdexp', 'resv']) near(await ttl(k), 60_000 + HOUR, `${k} at admission`);
  await new Promise((r) => setTimeout(r, 1_500));
  assert.equal((await l.extend({ ...base, holdId: 'sess', amount: 10n, ttlMs: 400_000 })).ok, true);
  for (const k of ['holds', 'holdexp', 'resv']) near(await ttl(k), 400_000 + HOUR, `${k} after the extension`);
  assert.ok(await ttl('holdsum') >= await ttl('holds'), 'the sum hash outlives the records it counts');
  // Another request of the account, with a shorter hold: the session's records keep their expiry.
  assert.equal((await l.admit({ ...base, holdId: 'short', rpm: 1e6, concurrency: 100, money: true, hold: 1_000n, ttlMs: 60_000, quotas: [{ dim: 't', limit: 100_000, need: 500 }] })).ok, true);
  for (const k of ['holds', 'holdexp', 'resv']) near(await ttl(k), 400_000 + HOUR, `${k} after a shorter hold`);
  assert.ok(await ttl('holdsum') >= await ttl('holds'), 'the sum hash still outlives them');
});

test('the scripts run as a Redis Functions library (FCALL), loaded once at start; a server that lost it is served by EVALSHA at once and gets it again; a Redis without Functions, or a user the ACL denies them, is served by EVALSHA', { timeout: 30_000 }, async (t) => {
  const libName = /name=(\S+)/.exec(FUNCTIONS_LIBRARY)[1];
  const loaded = async (r) => (await r.call('FUNCTION', 'LIST', 'LIBRARYNAME', libName)).length > 0;
  const counting = (l) => { // admissions by each way
    const n = { fcall: 0, evalsha: 0 };
    const fcall = l.redis.fcall.bind(l.redis);
    l.redis.fcall = (name, ...a) => { if (String(name).startsWith('tg_admit_')) n.fcall++; return fcall(name, ...a); };
    const admit = l.redis.tg_eval_admit.bind(l.redis);
    l.redis.tg_eval_admit = (...a) => { n.evalsha++; return admit(...a); };
    return n;
  };
  // Loaded at start, once; an admission goes by FCALL.
  const lPrefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const l = new RedisLimiter(REDIS, lPrefix);
  t.after(async () => { await l.close().catch(() => undefined); await clearRedisPrefix(lPrefix); });
  let loads = 0;
  const lCall = l.redis.call.bind(l.redis);
  l.redis.call = (cmd, ...a) => { if (String(cmd).toUpperCase() === 'FUNCTION' && a[0] === 'LOAD') loads++; return lCall(cmd, ...a); };
  await l.ready();
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await loaded(l.redis), true, 'the library is loaded when the limiter is ready');
  assert.equal(loads, 1, 'loaded once at start');
  const n = counting(l);
  assert.equal((await admit(l, 'f', 'f0', 1_000n, 100_000n)).ok, true);
  assert.deepEqual(n, { fcall: 1, evalsha: 0 });
  // The library deleted behind its back (a restart with nothing on disk): the next admission is
  // answered, by EVALSHA, with the same rule (the first hold still counts), and the library comes back.
  await l.redis.call('FUNCTION', 'DELETE', libName);
  assert.deepEqual(await admit(l, 'f', 'f1', 99_001n, 100_000n, { cover: true }), { ok: false, reason: 'insufficient_balance', available: 99_000n });
  assert.deepEqual(n, { fcall: 2, evalsha: 1 });
  for (let i = 0; i < 50 && !(await loaded(l.redis)); i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await loaded(l.redis), true, 'loaded again');
  await l.settle('f0', debit('f', 'f0', 400n), true);
  assert.equal((await l.pendingOf('f', 'key_f')).account, 400n);
  assert.equal((await admit(l, 'f', 'f2', 10n, 100_000n)).ok, true);
  assert.deepEqual(n, { fcall: 3, evalsha: 1 }, 'FCALL again once it is back');
  // A server without Functions (Redis before 7): every script by EVALSHA, the same answers.
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const old = new RedisLimiter(REDIS, prefix);
  const call = old.redis.call.bind(old.redis);
  old.redis.call = (cmd, ...a) => (String(cmd).toUpperCase() === 'FUNCTION' ? Promise.reject(new Error("ERR unknown command 'FUNCTION', with args beginning with: 'LOAD'")) : call(cmd, ...a));
  await old.ready();
  t.after(async () => { await old.close().catch(() => undefined); await clearRedisPrefix(prefix); });
  const m = counting(old);
  assert.equal((await admit(old, 'g', 'g0', 1_000n, 100_000n)).ok, true);
  assert.deepEqual(await admit(old, 'g', 'g1', 99_001n, 100_000n, { cover: true }), { ok: false, reason: 'insufficient_balance', available: 99_000n });
  await old.settle('g0', debit('g', 'g0', 400n), true);
  await old.committed('g', ['g0'], { balance: { amount: 99_600n, version: 2n }, spends: [] });
  assert.deepEqual(await old.pendingOf('g', 'key_g'), { account: 0n, key: 0n });
  assert.deepEqual(m, { fcall: 0, evalsha: 2 });
  // A user the ACL denies FUNCTION (a real ACL user on this Redis): EVALSHA, and the load not tried again each heartbeat.
  const admin = new Redis(REDIS);
  const user = `tgtest_${randomBytes(4).toString('hex')}`;
  await admin.call('ACL', 'SETUSER', user, 'on', '>pw', '~*', '&*', '+@all', '-function');
  t.after(async () => { await admin.call('ACL', 'DELUSER', user); await admin.quit(); });
  const aclPrefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const url = new URL(REDIS);
  url.username = user;
  url.password = 'pw';
  const denied = new RedisLimiter(url.href, aclPrefix);
  t.after(async () => { await denied.close().catch(() => undefined); await clearRedisPrefix(aclPrefix); });
  let tries = 0;
  const deniedCall = denied.redis.call.bind(denied.redis);
  denied.redis.call = (cmd, ...a) => { if (String(cmd).toUpperCase() === 'FUNCTION') tries++; return deniedCall(cmd, ...a); };
  await denied.ready();
  const d = counting(denied);
  assert.equal((await admit(denied, 'h', 'h0', 1_000n, 100_000n)).ok, true);
  assert.deepEqual(await admit(denied, 'h', 'h1', 99_001n, 100_000n, { cover: true }), { ok: false, reason: 'insufficient_balance', available: 99_000n });
  await new Promise((r) => setTimeout(r, 2_500)); // two heartbeats and more
  assert.deepEqual(d, { fcall: 0, evalsha: 2 });
  assert.equal(tries, 1, 'FUNCTION LOAD tried once, not again on each heartbeat');
});

test('settles of one account (finals freeing their slots, a session\'s part then its final, one debit recorded twice, from two instances) leave the same record in Redis whether each is applied before the next is recorded, all are queued one by one and applied in one pass, or a turn records them together', async (t) => {
  // [hold id, debit id, key, amount, final, covered]
  const settles = [
    ['h1', 'd1', 'k1', 700n, true],
    ['s1', 's1#1', 'k2', 900n, false, 1_000n],   // a part: 1,000 of the session's 3,000 comes off its hold
    ['h2', 'd2', 'k1', 1_200n, true],
    ['s1', 's1#2', 'k2', 600n, false, 1_000n],
    ['h3', 'd3', 'k1', 300n, true],
    ['h3', 'd3', 'k1', 350n, true],              // the same debit again (a retry): replaces, never adds
    ['s1', 's1#3', 'k2', 100n, true],            // the session ends: the rest of its hold is freed
  ];
  // Which instance records each settle (by index into the two limiters): the second records d2 and the
  // session's second part, so its pending records must name it as their owner, the others the first.
  const by = [0, 0, 1, 1, 0, 0, 0];
  const r = new Redis(REDIS);
  t.after(() => r.quit());
  const record = async (prefix, l, owners) => {
    await l.openHolds('st'); // the settles' bookkeeping, applied by the next script on the account
    const sum = await r.hgetall(`${prefix}{st}:holdsum`);
    const pend = await r.hgetall(`${prefix}{st}:pend`);
    // key and amount, and which of the two instances the record names as its owner
    for (const k of Object.keys(pend)) { const [key, amount, owner] = pend[k].split('|'); pend[k] = `${key}|${amount}|${owners.indexOf(owner)}`; }
    return { sum, pend, holds: await r.hlen(`${prefix}{st}:holds`), expiring: await r.zcard(`${prefix}{st}:holdexp`) };
  };
  const out = [];
  for (const mode of ['each applied', 'queued one by one', 'one turn']) {
    const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
    const ls = [await redisLimiter(t, prefix), await redisLimiter(t, prefix)];
    const [l] = ls;
    for (const [id, amount, key] of [['h1', 1_000n, 'k1'], ['h2', 2_000n, 'k1'], ['h3', 500n, 'k1'], ['s1', 3_000n, 'k2'], ['h4', 400n, 'k3']]) {
      assert.equal((await admit(l, 'st', id, amount, 100_000n, { keyId: key, concurrency: 3 })).ok, true);
    }
    const one = ([hold, id, key, amount, final, covered], i) => ls[by[i]].settle(hold, debit('st', id, amount, key), final, covered ?? amount);
    if (mode === 'one turn') await Promise.all(settles.map((x, i) => one(x, i)));
    else {
      for (const [i, x] of settles.entries()) {
        await one(x, i);
        if (mode === 'each applied') { await l.openHolds('st'); assert.equal(await r.llen(`${prefix}{st}:setq`), 0); }
      }
      if (mode === 'queued one by one') assert.equal(await r.llen(`${prefix}{st}:setq`), settles.length, 'each settle queued apart');
    }
    out.push(await record(prefix, l, ls.map((x) => x.owner)));
    // k1's three slots are free again: three more holds of it fit under its concurrency of 3.
    for (const id of ['n1', 'n2', 'n3']) assert.equal((await admit(l, 'st', id, 1n, 100_000n, { keyId: 'k1', concurrency: 3 })).ok, true, `${id} (${mode})`);
  }
  assert.deepEqual(out[1], out[0], 'queued one by one and applied in one pass: the same record in Redis as each applied alone');
  assert.deepEqual(out[2], out[0], 'one turn: the same record in Redis as each applied alone');
  const [rec] = out;
  assert.deepEqual(rec.pend, { d1: 'k1|700|0', d2: 'k1|1200|1', d3: 'k1|350|0', 's1#1': 'k2|900|0', 's1#2': 'k2|600|1', 's1#3': 'k2|100|0' });
  assert.equal(rec.sum.pending, '3850');
  assert.equal(rec.sum.total, '4250', 'pending 3,850 and h4\'s 400 held');
  assert.equal(rec.sum['n:k1'], undefined, 'no k1 hold open');
  assert.equal(rec.sum['n:k3'], '1');
  assert.equal(rec.holds, 1);
  assert.equal(rec.expiring, 1);
});

test('an account\'s queued settles, each recorded apart, are applied in one pass by the next script: its holds and pending records read once, not once per settle (Redis)', async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const l = await redisLimiter(t, prefix);
  const N = 20;
  for (let i = 0; i < N; i++) assert.equal((await admit(l, 'qp', `h${i}`, 1_000n, 1_000_000n)).ok, true);
  for (let i = 0; i < N; i++) await l.settle(`h${i}`, debit('qp', `d${i}`, 10n), true, 1_000n); // one queue entry each, as at a steady rate
  const r = new Redis(REDIS);
  t.after(() => r.quit());
  assert.equal(await r.llen(`${prefix}{qp}:setq`), N);
  // Every command the scripts run on this account's holds and pending records, as Redis's MONITOR shows them.
  const mon = await r.monitor();
  t.after(() => mon.disconnect());
  // MONITOR prints commands in the order Redis runs them, on its own connection: once the marker sent after the
  // script shows there, every command of the script has been seen.
  const seen = [];
  const marker = `${prefix}done`;
  let markerSeen;
  const done = new Promise((res) => { markerSeen = res; });
  mon.on('monitor', (_time, args) => {
    if (typeof args[1] !== 'string') return;
    if (args[1] === marker) markerSeen();
    else if (args[1].startsWith(`${prefix}{qp}:`)) seen.push(`${args[0].toUpperCase()} ${args[1].slice(prefix.length)}`);
  });
  await l.openHolds('qp'); // applies the queue first
  await r.echo(marker);
  await done;
  const count = (c) => seen.filter((x) => x === c).length;
  assert.equal(count('HMGET {qp}:holds'), 1, 'the holds read in one HMGET');
  assert.equal(count('HMGET {qp}:pend'), 1, 'the pending records read in one HMGET');
  assert.equal(count('HSET {qp}:pend'), 1, 'the pending records written in one HSET');
  assert.equal(count('HINCRBY {qp}:holdsum'), 5, 'each counter moved once: total, a:, n:, pending, p:');
  assert.equal(await r.llen(`${prefix}{qp}:setq`), 0);
  assert.equal(await r.hlen(`${prefix}{qp}:pend`), N, 'every debit pending');
  assert.equal(await r.hlen(`${prefix}{qp}:holds`), 0, 'every hold freed');
  const sum = await r.hgetall(`${prefix}{qp}:holdsum`);
  assert.equal(sum.pending, String(10 * N));
  assert.equal(sum.total, String(10 * N));
  assert.equal(sum['n:key_qp'], undefined);
});

test('the key ceiling counts pending debits and takes the newest committed spend', async (t) => {
  for (const l of await limiters(t)) {
    const o = { ceiling: 5_000n, spent: 1_000n };
    assert.equal((await admit(l, 'e', 'e0', 1_000n, 1_000_000n, o)).ok, true);
    await l.settle('e0', debit('e', 'e0', 3_000n), true);
    assert.equal((await admit(l, 'e', 'e1', 1n, 1_000_000n, o)).ok, true, `${l.kind}: 1,000 spent + 3,000 pending < 5,000`);
    await l.release('e', 'e1');
    await l.committed('e', ['e0'], { balance: null, spends: [{ keyId: 'key_e', period: 'month', start: NOW, spent: 5_000n, version: 9n }] });
    assert.deepEqual(await admit(l, 'e', 'e2', 1n, 1_000_000n, o), { ok: false, reason: 'key_spend_limit_reached', available: 0n },
      `${l.kind}: the committed spend (5,000) wins over the caller's stale 1,000`);
  }
});

test('unbilled requests take rpm and a concurrency slot but skip balance and ceiling', async (t) => {
  for (const l of await limiters(t)) {
    assert.equal((await admit(l, 'f', 'f0', 0n, 0n, { money: false, concurrency: 1 })).ok, true, `${l.kind}: no balance needed`);
    const second = await admit(l, 'f', 'f1', 0n, 0n, { money: false, concurrency: 1 });
    assert.equal(second.ok, false);
    assert.equal(second.reason, 'concurrency_limit_exceeded', `${l.kind}: the slot is taken`);
    await l.release('f', 'f0');
    assert.equal((await admit(l, 'f', 'f2', 0n, 0n, { money: false, concurrency: 1 })).ok, true);
  }
});

test('a Redis owner that stops beating is taken over: its holds freed, its pending and running debits handed on once', { timeout: 30_000 }, async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const a = await redisLimiter(t, prefix);
  const b = await redisLimiter(t, prefix);
  assert.equal((await admit(a, 'g', 'g0', 5_000n, 100_000n)).ok, true);
  await a.settle('g0', debit('g', 'g0', 1_234n), true);         // priced, not committed
  assert.equal((await admit(a, 'g', 'g1', 5_000n, 100_000n)).ok, true);
  a.progress('g1', debit('g', 'g1', 777n));                       // a stream mid-flight
  assert.equal((await admit(a, 'g', 'g2', 5_000n, 100_000n)).ok, true); // no output yet
  await new Promise((r) => setTimeout(r, 50));
  await a.close(false); // dies: no more heartbeats, nothing cleaned up
  assert.deepEqual(await b.claimOrphans(), [], 'a live-looking owner is left alone');
  const got = await takenOver(b);
  assert.deepEqual(got.map((d) => [d.id, d.amount]).sort(), [['g0', 1_234n], ['g1', 777n]]);
  assert.equal(await b.openHolds('g'), 0, 'the dead owner\'s holds are freed');
  assert.deepEqual(await b.claimOrphans(), [], 'each is handed on once');
  // Until committed they still count: 100,000 - 1,234 - 777 = 97,989 is the headroom.
  assert.equal((await admit(b, 'g', 'g3', 97_989n, 100_000n)).ok, true);
  assert.equal((await admit(b, 'g', 'g4', 1n, 100_000n)).ok, false);
  await b.release('g', 'g3');
  await b.committed('g', ['g0', 'g1'], { balance: { amount: 97_989n, version: 5n }, spends: [] });
  assert.equal((await admit(b, 'g', 'g5', 97_988n, 100_000n, { version: 1n })).ok, true, 'committed: the ledger balance applies');
});

test('a settle only recorded when its owner dies (its bookkeeping not yet applied by any script) is applied and handed on by the takeover: the hold freed, the debit billed once, the headroom exact', { timeout: 30_000 }, async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const a = await redisLimiter(t, prefix);
  const b = await redisLimiter(t, prefix);
  const r = new Redis(REDIS);
  t.after(() => r.quit());
  assert.equal((await admit(a, 'q', 'q0', 5_000n, 100_000n)).ok, true);
  assert.equal((await admit(a, 'q', 'q1', 3_000n, 100_000n)).ok, true);
  // Settled in one turn (one queued call), their entries with text JSON escapes (a quote, a newline, a control
  // character) and characters past ASCII: each must come back as it went in.
  const d0 = debit('q', 'q0', 1_234n);
  const d1 = { ...debit('q', 'q1', 2_000n), entry: JSON.stringify({ idemKey: 'q1', note: 'a "quoted"\nline \u001e, café ☕ 🚀', kind: 'debit' }) };
  await Promise.all([a.settle('q0', d0, true), a.settle('q1', d1, true)]);
  // Recorded in the account's settle queue and nothing else: the holds are still there, no pending record yet.
  assert.equal(await r.llen(`${prefix}{q}:setq`), 1, 'the turn\'s two settles recorded in one entry');
  assert.equal(await r.hlen(`${prefix}{q}:holds`), 2);
  assert.equal(await r.hlen(`${prefix}{q}:pend`), 0);
  await a.close(false); // dies before any script on the account: no heartbeat, nothing cleaned up
  const got = await takenOver(b);
  assert.deepEqual(got.map((d) => [d.id, d.amount]).sort(), [['q0', 1_234n], ['q1', 2_000n]]);
  assert.deepEqual(got.map((d) => d.entry).sort(), [d0.entry, d1.entry].sort(), 'each entry handed on as it was settled');
  assert.equal(await r.llen(`${prefix}{q}:setq`), 0, 'the queue was applied');
  assert.equal(await b.openHolds('q'), 0, 'both holds freed');
  assert.deepEqual(await b.claimOrphans(), [], 'handed on once');
  // The debits count until committed, the holds not at all: 100,000 - 1,234 - 2,000 = 96,766 is the headroom.
  assert.equal((await admit(b, 'q', 'q2', 96_766n, 100_000n)).ok, true);
  assert.equal((await admit(b, 'q', 'q3', 1n, 100_000n)).ok, false);
});

test('after Redis comes back without an owner\'s records (a restart with nothing on disk), the owner lists its accounts again, so a debit it records since is still taken over when it dies', { timeout: 30_000 }, async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const a = await redisLimiter(t, prefix);
  const b = await redisLimiter(t, prefix);
  assert.equal((await admit(a, 'r', 'r0', 5_000n, 100_000n)).ok, true); // a lists account r
  await a.settle('r0', debit('r', 'r0', 100n), true);
  await a.committed('r', ['r0'], { balance: { amount: 99_900n, version: 2n }, spends: [] });
  // Everything under the prefix lost, and a's connection dropped: it reconnects to a server without its list.
  await clearRedisPrefix(prefix);
  const admin = new Redis(REDIS);
  t.after(() => admin.quit());
  const back = new Promise((r) => a.redis.once('ready', r));
  await admin.client('KILL', 'ID', String(await a.redis.client('ID')));
  await back;
  // A debit recorded since (durable in Redis, not committed), then a dies.
  assert.equal((await admit(a, 'r', 'r1', 5_000n, 99_900n, { version: 2n })).ok, true);
  await a.settle('r1', debit('r', 'r1', 321n), true);
  await a.close(false);
  const got = await takenOver(b);
  assert.deepEqual(got.map((d) => [d.id, d.amount]), [['r1', 321n]], 'the debit recorded after the reconnection is handed on');
});

test('an account this instance stopped using leaves its account list once nothing of its is there, so a takeover reads only the accounts it serves; one with its hold or an unapplied settle stays, and one used again during its removal is listed again after it, so a death then still hands its debit on', { timeout: 30_000 }, async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const a = await redisLimiter(t, prefix);
  const b = await redisLimiter(t, prefix);
  const r = new Redis(REDIS);
  t.after(() => r.quit());
  const listed = async () => (await r.smembers(`${prefix}{registry}:q:inst:${a.owner}:accts`)).sort();
  // u1 and u5: served and done (settled and committed). u2: a hold still open. u3: a settle recorded in its queue only.
  for (const acct of ['u1', 'u5']) {
    assert.equal((await admit(a, acct, `${acct}h`, 5_000n, 100_000n)).ok, true);
    await a.settle(`${acct}h`, debit(acct, `${acct}h`, 100n), true);
    await a.committed(acct, [`${acct}h`], { balance: { amount: 99_900n, version: 2n }, spends: [] });
  }
  assert.equal((await admit(a, 'u2', 'u2h', 5_000n, 100_000n)).ok, true);
  assert.equal((await admit(a, 'u3', 'u3h', 5_000n, 100_000n)).ok, true);
  await a.settle('u3h', debit('u3', 'u3h', 300n), true);
  assert.equal(await r.llen(`${prefix}{u3}:setq`), 1, 'u3\'s settle is only queued');
  assert.deepEqual(await listed(), ['u1', 'u2', 'u3', 'u5']);
  assert.equal(await a.unlistIdle(), 0, 'none has been idle for the default ten minutes');
  // u5 is used again in the same turn as its removal starts: its admission waits, then lists it again.
  const removing = a.unlistIdle(0);
  const again = admit(a, 'u5', 'u5h2', 5_000n, 99_900n, { version: 2n });
  assert.equal(await removing, 2, 'u1 and u5 left (u2 has a hold, u3 a debit); u5\'s admission waited for that');
  assert.equal((await again).ok, true);
  assert.deepEqual(await listed(), ['u2', 'u3', 'u5']);
  await a.settle('u5h2', debit('u5', 'u5h2', 500n), true);
  await a.settle('u2h', debit('u2', 'u2h', 200n), true);
  // a dies: every debit it recorded and did not commit is handed on, on the accounts still listed.
  await a.close(false);
  const got = await takenOver(b);
  assert.deepEqual(got.map((d) => [d.id, d.amount]).sort(), [['u2h', 200n], ['u3h', 300n], ['u5h2', 500n]]);
});

test('a stream whose hold passes its deadline keeps it while its running record is there: a dead owner\'s (every instance down that long) is still taken over and billed, and an admission sweeping the account does not drop it', { timeout: 30_000 }, async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const a = await redisLimiter(t, prefix);
  const ttlAdmit = (l, id, ttlMs) => admit(l, 'w', id, 5_000n, 100_000n, { ttlMs });
  assert.equal((await ttlAdmit(a, 'w1', 200)).ok, true);
  a.progress('w1', debit('w', 'w1', 777n));                       // a stream mid-flight, its output so far
  assert.equal((await ttlAdmit(a, 'w0', 200)).ok, true);          // a request with no output yet
  await new Promise((r) => setTimeout(r, 50));
  await a.close(false);                                           // dies
  await new Promise((r) => setTimeout(r, 400));                   // both holds' deadlines pass
  const b = await redisLimiter(t, prefix);                        // an instance comes up, and a request of the account arrives first
  assert.equal((await ttlAdmit(b, 'w2', 60_000)).ok, true);
  assert.equal(await b.openHolds('w'), 2, 'the hold with no output is dropped; the stream\'s is kept with its running record');
  const got = await takenOver(b);
  assert.deepEqual(got.map((d) => [d.id, d.amount]), [['w1', 777n]], 'the takeover bills the stream\'s output');
  assert.equal(await b.openHolds('w'), 1, 'and frees its hold');
});

test('a stream that outlasts its hold\'s life keeps its hold (its slot and amount) while it runs, on both limiters, until it settles', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tg-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  for (const l of [new MemoryLimiter(new DebitJournal(join(dir, 'debits.journal'))), await redisLimiter(t)]) {
    const at = (id, ttlMs) => admit(l, 'v', id, 5_000n, 100_000n, { ttlMs });
    assert.equal((await at('v1', 200)).ok, true);
    l.progress('v1', debit('v', 'v1', 300n));                     // streaming: its output so far
    assert.equal((await at('v0', 200)).ok, true);                 // a request with no output, abandoned
    await new Promise((r) => setTimeout(r, 400));                 // both holds' deadlines pass
    assert.equal((await at('v2', 60_000)).ok, true);              // another request of the account sweeps them
    assert.equal(await l.openHolds('v'), 2, `${l.kind}: the running stream keeps its hold; the abandoned one is dropped`);
    await l.settle('v1', debit('v', 'v1', 900n), true);           // the stream ends
    assert.equal(await l.openHolds('v'), 1, `${l.kind}: freed when it settles`);
    assert.deepEqual(await l.pendingOf('v', 'key_v'), { account: 900n, key: 900n }, `${l.kind}: billed once, its final amount`);
  }
});

test('an owner listed in the registry from before the hash tags (an older version killed mid-upgrade) is taken over too', { timeout: 30_000 }, async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const a = await redisLimiter(t, prefix);
  const b = await redisLimiter(t, prefix);
  assert.equal((await admit(a, 'o', 'o0', 5_000n, 100_000n)).ok, true);
  await a.settle('o0', debit('o', 'o0', 4_321n), true);
  await new Promise((r) => setTimeout(r, 50));
  await a.close(false);
  // As an older version listed itself: `<prefix>instances` and `<prefix>inst:<owner>:accts`.
  const raw = new Redis(REDIS);
  t.after(() => raw.quit());
  await raw.zrem(`${prefix}{registry}:q:instances`, a.owner);
  await raw.zadd(`${prefix}instances`, 0, a.owner);
  await raw.rename(`${prefix}{registry}:q:inst:${a.owner}:accts`, `${prefix}inst:${a.owner}:accts`);
  const got = await takenOver(b);
  assert.deepEqual(got.map((d) => [d.id, d.amount]), [['o0', 4_321n]]);
  assert.equal(await raw.exists(`${prefix}inst:${a.owner}:accts`), 0, 'the old listing is cleared');
  assert.deepEqual(await b.claimOrphans(), [], 'handed on once');
});

test('an instance lists itself apart from the versions before the settle queue, whose takeover would leave its queued debits pending for good; it takes over an owner listed in theirs, its queued settles applied', { timeout: 30_000 }, async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const a = await redisLimiter(t, prefix);
  const b = await redisLimiter(t, prefix);
  const raw = new Redis(REDIS);
  t.after(() => raw.quit());
  // An earlier version reads `{registry}:instances` alone: no instance of this one is there for it to take over.
  assert.deepEqual(await raw.zrange(`${prefix}{registry}:instances`, 0, -1), []);
  assert.deepEqual((await raw.zrange(`${prefix}{registry}:q:instances`, 0, -1)).sort(), [a.owner, b.owner].sort());
  // a dies with a settle only queued; its listing is moved to where an earlier version lists itself.
  assert.equal((await admit(a, 'p', 'p0', 5_000n, 100_000n)).ok, true);
  await a.settle('p0', debit('p', 'p0', 2_345n), true);
  assert.equal(await raw.llen(`${prefix}{p}:setq`), 1);
  await a.close(false);
  await raw.zrem(`${prefix}{registry}:q:instances`, a.owner);
  await raw.zadd(`${prefix}{registry}:instances`, 0, a.owner);
  await raw.rename(`${prefix}{registry}:q:inst:${a.owner}:accts`, `${prefix}{registry}:inst:${a.owner}:accts`);
  const got = await takenOver(b);
  assert.deepEqual(got.map((d) => [d.id, d.amount]), [['p0', 2_345n]]);
  assert.equal(await raw.exists(`${prefix}{registry}:inst:${a.owner}:accts`), 0, 'its listing is cleared');
  assert.deepEqual(await raw.zrange(`${prefix}{registry}:instances`, 0, -1), []);
  assert.deepEqual(await b.claimOrphans(), [], 'handed on once');
});

test('the in-process journal hands a crashed run\'s uncommitted debits to the next run, once', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tg-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'run', 'debits.journal');
  const one = new MemoryLimiter(new DebitJournal(path));
  for (const id of ['h0', 'h1', 'h2']) {
    assert.equal((await admit(one, 'h', id, 5_000n, 100_000n)).ok, true);
    await one.settle(id, debit('h', id, 100n), true);
  }
  await one.committed('h', ['h1'], { balance: null, spends: [] });
  assert.equal((await admit(one, 'h', 'h3', 5_000n, 100_000n)).ok, true);
  one.progress('h3', debit('h', 'h3', 50n));
  assert.equal((await admit(one, 'h', 'h4', 5_000n, 100_000n)).ok, true);
  one.progress('h4', debit('h', 'h4', 60n));
  await one.release('h', 'h4'); // released after a progress record: nothing to bill
  // "crash": a new process opens the same journal without closing the first
  const two = new MemoryLimiter(new DebitJournal(path));
  const left = await two.claimOrphans();
  assert.deepEqual(left.map((d) => [d.id, d.amount]).sort(), [['h0', 100n], ['h2', 100n], ['h3', 50n]]);
  assert.deepEqual(await two.claimOrphans(), [], 'once per run');
  await two.committed('h', left.map((d) => d.id), { balance: null, spends: [] });
  const three = new MemoryLimiter(new DebitJournal(path));
  assert.deepEqual(await three.claimOrphans(), [], 'committed debits are not replayed again');
});

test('a long session extends its hold under the admission rule, and an extension past the balance or ceiling is refused', async (t) => {
  for (const l of await limiters(t)) {
    const base = { accountId: 'x', keyId: 'key_x', balance: { amount: 3_000n, version: 1n }, ceiling: null,
      spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs: 60_000 };
    assert.equal((await admit(l, 'x', 'x0', 1_000n, 3_000n)).ok, true);
    assert.deepEqual(await l.extend({ ...base, holdId: 'x0', amount: 1_500n }), { ok: true }, `${l.kind}: 2,500 of 3,000 held`);
    assert.deepEqual(await l.extend({ ...base, holdId: 'x0', amount: 499n }), { ok: true }, `${l.kind}: 2,999 held, headroom left`);
    assert.deepEqual(await l.extend({ ...base, holdId: 'x0', amount: 1n }), { ok: true }, `${l.kind}: the last nanodollar of headroom`);
    assert.deepEqual(await l.extend({ ...base, holdId: 'x0', amount: 1n }), { ok: false, reason: 'insufficient_balance', available: 0n }, `${l.kind}: nothing left`);
    assert.deepEqual(await l.extend({ ...base, holdId: 'nope', amount: 1n }), { ok: false, reason: 'missing' });
    // the extended hold is freed whole
    await l.release('x', 'x0');
    assert.equal((await admit(l, 'x', 'x1', 2_999n, 3_000n)).ok, true, `${l.kind}: all 3,000 freed`);
    await l.release('x', 'x1');
    // the ceiling applies too
    const c = { ...base, ceiling: 2_000n };
    assert.equal((await admit(l, 'x', 'x2', 1_000n, 3_000n, { ceiling: 2_000n })).ok, true);
    assert.deepEqual(await l.extend({ ...c, holdId: 'x2', amount: 999n }), { ok: true });
    assert.deepEqual(await l.extend({ ...c, holdId: 'x2', amount: 1n }), { ok: true }, `${l.kind}: 1,999 < 2,000 before this one`);
    assert.deepEqual(await l.extend({ ...c, holdId: 'x2', amount: 1n }), { ok: false, reason: 'key_spend_limit_reached', available: 0n });
  }
});

test('a known cost (cover) must fit in the balance less other holds and in the ceiling remainder, on admission and extension alike', async (t) => {
  for (const l of await limiters(t)) {
    assert.equal((await admit(l, 'k', 'k0', 600n, 1_000n)).ok, true, `${l.kind}: a bounded-only hold of 600`);
    // 400 left: a known 401 does not fit, a known 400 does; without cover, 401 would be admitted (400 > 0).
    assert.deepEqual(await admit(l, 'k', 'k1', 401n, 1_000n, { cover: true }), { ok: false, reason: 'insufficient_balance', available: 400n }, `${l.kind}: 401 > 400 left`);
    assert.equal((await admit(l, 'k', 'k2', 400n, 1_000n, { cover: true })).ok, true, `${l.kind}: 400 fits exactly`);
    await l.release('k', 'k0');
    await l.release('k', 'k2');
    // The ceiling's remainder: 1,000 less 700 spent = 300 (newer committed figures than the ones above).
    const o = { ceiling: 1_000n, spent: 700n, cover: true, version: 2n, spentVersion: 2n };
    assert.deepEqual(await admit(l, 'k', 'k3', 301n, 10_000n, o), { ok: false, reason: 'key_spend_limit_reached', available: 300n }, `${l.kind}: 301 > 300 under the ceiling`);
    assert.equal((await admit(l, 'k', 'k4', 100n, 10_000n, o)).ok, true);
    const ext = { accountId: 'k', keyId: 'key_k', balance: { amount: 10_000n, version: 2n }, ceiling: 1_000n,
      spent: { period: 'month', start: NOW, amount: 700n, version: 2n }, ttlMs: 60_000, holdId: 'k4', cover: true };
    assert.deepEqual(await l.extend({ ...ext, amount: 201n }), { ok: false, reason: 'key_spend_limit_reached', available: 200n }, `${l.kind}: extension past the remainder`);
    assert.deepEqual(await l.extend({ ...ext, amount: 200n }), { ok: true });
    await l.release('k', 'k4');
    assert.equal(await l.openHolds('k'), 0);
  }
});

test('a debit recorded twice under one id (a takeover of an owner that was only slow) counts once, at its last amount', async (t) => {
  for (const l of await limiters(t)) {
    assert.equal((await admit(l, 'y', 'y0', 5_000n, 10_000n)).ok, true);
    await l.settle('y0', debit('y', 'y0', 2_000n), true);
    await l.settle('y0', debit('y', 'y0', 1_500n), true);
    assert.deepEqual(await l.pendingOf('y', 'key_y'), { account: 1_500n, key: 1_500n }, `${l.kind}: one pending record`);
    assert.equal((await admit(l, 'y', 'y1', 8_500n, 10_000n)).ok, true, `${l.kind}: 8,500 of headroom`);
    assert.equal((await admit(l, 'y', 'y2', 1n, 10_000n)).ok, false, `${l.kind}: and no more`);
    await l.release('y', 'y1');
    await l.committed('y', ['y0'], { balance: { amount: 8_500n, version: 2n }, spends: [] });
    assert.deepEqual(await l.pendingOf('y', 'key_y'), { account: 0n, key: 0n });
  }
});

test('a session settling in parts: each part takes what it covered off the hold, so held + billed never counts one stretch twice', async (t) => {
  for (const l of await limiters(t)) {
    // 10,000 of balance; the session holds 1,000 for its first stretch, settles it, extends for the next.
    assert.equal((await admit(l, 's', 's0', 1_000n, 10_000n)).ok, true);
    const base = { accountId: 's', keyId: 'key_s', balance: { amount: 10_000n, version: 1n }, ceiling: null,
      spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs: 60_000 };
    for (let seq = 1; seq <= 8; seq++) {
      await l.settle('s0', debit('s', `s0#${seq}`, 1_000n), false, 1_000n);
      if (seq < 8) assert.deepEqual(await l.extend({ ...base, holdId: 's0', amount: 1_000n }), { ok: true }, `${l.kind}: stretch ${seq + 1}`);
    }
    // 8,000 billed (pending) and nothing held: 2,000 of headroom, exactly.
    assert.deepEqual(await l.pendingOf('s', 'key_s'), { account: 8_000n, key: 8_000n });
    // (admission needs balance left above zero, whatever the new hold's size)
    assert.equal((await admit(l, 's', 'other', 2_000n, 10_000n)).ok, true, `${l.kind}: 2,000 is left beside the session`);
    assert.equal((await admit(l, 's', 'more', 1n, 10_000n)).ok, false, `${l.kind}: and nothing more`);
    await l.release('s', 'other');
    // a part that used less than it held for gives the rest back only when told what it covered
    assert.deepEqual(await l.extend({ ...base, holdId: 's0', amount: 1_500n }), { ok: true });
    await l.settle('s0', debit('s', 's0#9', 400n), false, 1_500n);
    assert.equal((await admit(l, 's', 'fits', 1_600n, 10_000n)).ok, true, `${l.kind}: 8,400 billed, nothing held`);
    assert.equal((await admit(l, 's', 'more2', 1n, 10_000n)).ok, false, `${l.kind}: 1,600 was all that was left`);
    await l.release('s', 'fits');
    // the same part recorded again (a retry) takes nothing more off
    await l.settle('s0', debit('s', 's0#9', 400n), false, 1_500n);
    assert.deepEqual(await l.pendingOf('s', 'key_s'), { account: 8_400n, key: 8_400n });
    await l.release('s', 's0');
    assert.equal((await admit(l, 's', 'last', 1_600n, 10_000n)).ok, true, `${l.kind}: the session's end frees no more than was held`);
    assert.equal((await admit(l, 's', 'over', 2n, 10_000n)).ok, false);
  }
});

test('a session\'s billed unit that counts as a request takes a token of the key\'s rpm, and is refused when none is left', async (t) => {
  for (const l of await limiters(t)) {
    const rpm = 3;
    const base = { accountId: 'r', keyId: 'key_r', balance: { amount: 1_000_000n, version: 1n }, ceiling: null,
      spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs: 60_000 };
    // the session itself took one of three tokens
    assert.equal((await l.admit({ ...base, holdId: 'r0', rpm, concurrency: 10, money: true, hold: 0n })).ok, true);
    assert.deepEqual(await l.extend({ ...base, holdId: 'r0', amount: 10n, rpm }), { ok: true }, `${l.kind}: the second token`);
    assert.deepEqual(await l.extend({ ...base, holdId: 'r0', amount: 10n, rpm }), { ok: true }, `${l.kind}: the third`);
    const refused = await l.extend({ ...base, holdId: 'r0', amount: 10n, rpm });
    assert.equal(refused.reason, 'rate_limit_exceeded', `${l.kind}: none left`);
    assert.ok(refused.retryMs > 0 && refused.retryMs <= 20_000, `${l.kind}: retry in ${refused.retryMs} ms (one token = 20 s at 3 rpm)`);
    assert.deepEqual(await l.extend({ ...base, holdId: 'r0', amount: 10n }), { ok: true }, `${l.kind}: an extension that is no request takes no token`);
    await l.release('r', 'r0');
  }
});

test('a stretch held for and billed nothing (a failed part) is given back by shrink, never below zero, and the slot stays', async (t) => {
  for (const l of await limiters(t)) {
    const base = { accountId: 'k', keyId: 'key_k', balance: { amount: 10_000n, version: 1n }, ceiling: null,
      spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs: 60_000 };
    const other = { keyId: 'key_k2' };
    // (admission needs balance left above zero, whatever the new hold's size: filling it up shows what is held)
    assert.equal((await admit(l, 'k', 'k0', 1_000n, 10_000n, { concurrency: 1 })).ok, true);
    assert.deepEqual(await l.extend({ ...base, holdId: 'k0', amount: 6_000n }), { ok: true });
    assert.equal((await admit(l, 'k', 'f1', 3_000n, 10_000n, other)).ok, true);
    assert.equal((await admit(l, 'k', 'x1', 1n, 10_000n, other)).ok, false, `${l.kind}: 7,000 + 3,000 held, nothing left`);
    await l.release('k', 'f1');
    await l.shrink('k', 'k0', 6_000n);
    assert.equal((await admit(l, 'k', 'f2', 9_000n, 10_000n, other)).ok, true);
    assert.equal((await admit(l, 'k', 'x2', 1n, 10_000n, other)).ok, false, `${l.kind}: the 6,000 came back, no more`);
    await l.release('k', 'f2');
    await l.shrink('k', 'k0', 5_000n);
    await l.shrink('k', 'gone', 5_000n);
    assert.equal((await admit(l, 'k', 'f3', 10_000n, 10_000n, other)).ok, true);
    assert.equal((await admit(l, 'k', 'x3', 1n, 10_000n, other)).ok, false, `${l.kind}: shrunk to zero and not below`);
    await l.release('k', 'f3');
    assert.equal((await admit(l, 'k', 'x4', 1n, 10_000n, { concurrency: 1 })).ok, false, `${l.kind}: the shrunk hold keeps its slot`);
    await l.release('k', 'k0');
    assert.equal((await admit(l, 'k', 'k5', 1n, 10_000n, { concurrency: 1 })).ok, true, `${l.kind}: released, the slot is free`);
  }
});

test('20,000 holds of one account admitted in one turn, then 10,000 settled and 10,000 released in one turn, all reach Redis (sent in slices, not as one call that overflows the stack)', { timeout: 60_000 }, async (t) => {
  const l = await redisLimiter(t);
  const n = 10_000;
  // Admitted in one turn too: 20,000 admissions of one account queued before the first flush.
  const admitted = await Promise.all([
    ...Array.from({ length: n }, (_, i) => admit(l, 'z', `zs${i}`, 10n, 200_000n, { concurrency: 100_000 })),
    ...Array.from({ length: n }, (_, i) => admit(l, 'z', `zr${i}`, 10n, 200_000n, { concurrency: 100_000 })),
  ]);
  assert.equal(admitted.filter((o) => o.ok).length, 2 * n, 'every admission answered, each admitted');
  assert.equal(await l.openHolds('z'), 2 * n);
  // One turn: every settle and release is queued before the first flush.
  await Promise.all([
    ...Array.from({ length: n }, (_, i) => l.settle(`zs${i}`, debit('z', `zs${i}`, 7n), true)),
    ...Array.from({ length: n }, (_, i) => l.release('z', `zr${i}`)),
  ]);
  assert.equal(await l.openHolds('z'), 0, 'every hold is gone');
  // Pending are 7 x 10,000 = 70,000 of a 200,000 balance: 130,000 can be held, and not a unit more.
  assert.equal((await admit(l, 'z', 'zfit', 130_000n, 200_000n, { concurrency: 100_000 })).ok, true, 'every debit counts, at its amount');
  assert.equal((await admit(l, 'z', 'zover', 1n, 200_000n, { concurrency: 100_000 })).ok, false);
});

test('a turn of admissions of one account under key ceilings, with newer committed balance and spend arriving within it, gets the same answers and leaves the same record in Redis as one at a time', async (t) => {
  // [hold id, key, amount, options], in the order they arrive in the turn. Balance 10,000 (version 1); ka's ceiling 3,000, 500 spent.
  const asks = [
    ['c1', 'ka', 1_000n, {}],
    ['c2', 'ka', 1_000n, {}],
    ['c3', 'ka', 400n, { cover: true }],                                // the 500 left of ka's ceiling covers it
    ['c4', 'kb', 2_000n, {}],
    ['c5', 'ka', 200n, { cover: true }],                                // 100 left: refused
    ['c6', 'kb', 2_000n, { balance: 4_000n, version: 2n }],             // a newer committed balance: 4,000 less 4,400 held
    ['c7', 'ka', 50n, { balance: 20_000n, version: 3n, spent: 0n, spentVersion: 2n, start: 'old' }], // a newer balance; an older period's spend, not taken
    ['c8', 'ka', 50n, { balance: 20_000n, version: 3n, spent: 2_900n, spentVersion: 3n }], // a newer spend: 2,900 + 2,450 held
    ['c9', 'kc', 0n, { balance: 20_000n, version: 3n }],               // a zero hold: a slot, no money
    ['c10', 'kb', 3_000n, { balance: 20_000n, version: 3n, cover: true }],
  ];
  const ask = (l, [id, key, amount, o]) => l.admit({
    holdId: id, accountId: 'ceil', keyId: key, rpm: 1_000_000, concurrency: 1_000, money: true, hold: amount,
    balance: { amount: o.balance ?? 10_000n, version: o.version ?? 1n }, ceiling: key === 'ka' ? 3_000n : null,
    spent: { period: 'month', start: o.start === 'old' ? '1999-01-01' : NOW, amount: o.spent ?? 500n, version: o.spentVersion ?? 1n }, ttlMs: 60_000, cover: o.cover,
  });
  const gist = (o) => (o.ok ? 'ok' : `${o.reason}${o.available !== undefined ? ` ${o.available}` : ''}`);
  const expected = ['ok', 'ok', 'ok', 'ok', 'key_spend_limit_reached 100', 'insufficient_balance -400', 'ok', 'key_spend_limit_reached -2350', 'ok', 'ok'];
  const record = async (l, prefix) => {
    const r = l.redis;
    const sum = await r.hgetall(`${prefix}{ceil}:holdsum`);
    const holds = await r.hgetall(`${prefix}{ceil}:holds`);
    for (const k of Object.keys(holds)) holds[k] = holds[k].replace(/\|[^|]*$/, ''); // less the owner
    return { sum, holds, expiring: await r.zcard(`${prefix}{ceil}:holdexp`) };
  };
  const pa = `tgtest:${randomBytes(5).toString('hex')}:`, pb = `tgtest:${randomBytes(5).toString('hex')}:`;
  const alone = await redisLimiter(t, pa);
  const oneByOne = [];
  for (const a of asks) oneByOne.push(gist(await ask(alone, a)));
  const together = await redisLimiter(t, pb);
  const inOneTurn = (await Promise.all(asks.map((a) => ask(together, a)))).map(gist);
  assert.deepEqual(oneByOne, expected, 'one at a time');
  assert.deepEqual(inOneTurn, expected, 'in one turn');
  const [ra, rb] = [await record(alone, pa), await record(together, pb)];
  assert.deepEqual(rb, ra, 'the same record in Redis');
  assert.equal(ra.sum.total, '7450');
  assert.equal(ra.sum['a:ka'], '2450');
  assert.equal(ra.sum['n:ka'], '4');
  assert.equal(ra.sum.bal, '20000');
  assert.equal(ra.sum[`sm:ka`], `${NOW}|2900|3`);
  assert.equal(ra.expiring, 7);
});

test('a turn of admissions over two accounts is decided in order, each as if alone (the same answers as one at a time), in one script call per account', async (t) => {
  const A = 'turn-a', B = 'turn-b';
  // [account, hold id, amount, balance, options], in the order they arrive in the turn.
  const asks = [
    [A, 'a1', 1_000n, 4_500n, { keyId: 'ka1', concurrency: 3 }],
    [B, 'b1', 1_000n, 2_000n, { cover: true }],
    [A, 'a2', 1_000n, 4_500n, { keyId: 'ka1', concurrency: 3 }],
    [B, 'b2', 1_000n, 2_000n, { cover: true }],
    [A, 'a3', 1_000n, 4_500n, { keyId: 'ka1', concurrency: 3 }],
    [A, 'r1', 0n, 4_500n, { keyId: 'ka2', money: false, rpm: 2 }],
    [B, 'b3', 1_000n, 2_000n, { cover: true }],
    [A, 'a4', 1_000n, 4_500n, { keyId: 'ka1', concurrency: 3 }],
    [A, 'r2', 0n, 4_500n, { keyId: 'ka2', money: false, rpm: 2 }],
    [A, 'a5', 1_000n, 4_500n, { keyId: 'ka3' }],
    [A, 'r3', 0n, 4_500n, { keyId: 'ka2', money: false, rpm: 2 }],
    [A, 'a6', 1_000n, 4_500n, { keyId: 'ka3' }],
    [A, 'a7', 1_000n, 4_500n, { keyId: 'ka3' }],
  ];
  const ask = (l, [acct, id, amount, balance, o]) => l.admit({
    holdId: id, accountId: acct, keyId: o.keyId ?? `key_${acct}`, rpm: o.rpm ?? 1_000_000, concurrency: o.concurrency ?? 1_000, money: o.money ?? true, hold: amount,
    balance: { amount: balance, version: 1n }, ceiling: null, spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs: 60_000, cover: o.cover,
  });
  const gist = (o) => (o.ok ? 'ok' : `${o.reason}${o.available !== undefined ? ` ${o.available}` : ''}`);
  const expected = ['ok', 'ok', 'ok', 'ok', 'ok', 'ok', 'insufficient_balance 0', 'concurrency_limit_exceeded', 'ok', 'ok', 'rate_limit_exceeded', 'ok', 'insufficient_balance -500'];
  for (const kind of ['memory', 'redis']) {
    const fresh = async () => (kind === 'memory' ? new MemoryLimiter() : redisLimiter(t));
    const alone = await fresh();
    const oneByOne = [];
    for (const a of asks) oneByOne.push(gist(await ask(alone, a)));
    const together = await fresh();
    let calls = 0;
    if (kind === 'redis') {
      // The script goes by FCALL (Redis 7, the library loaded) or by EVALSHA: either counts.
      const r = together.redis;
      const admitScript = r.tg_eval_admit.bind(r);
      r.tg_eval_admit = (...a) => { calls++; return admitScript(...a); };
      const fcall = r.fcall.bind(r);
      r.fcall = (name, ...a) => { if (String(name).startsWith('tg_admit_')) calls++; return fcall(name, ...a); };
    }
    const inOneTurn = (await Promise.all(asks.map((a) => ask(together, a)))).map(gist);
    assert.deepEqual(oneByOne, expected, `${kind}: one at a time`);
    assert.deepEqual(inOneTurn, expected, `${kind}: in one turn`);
    if (kind === 'redis') assert.equal(calls, 2, 'one admission script call per account for the turn');
    assert.equal(await together.openHolds(A), 7);
    assert.equal(await together.openHolds(B), 2);
  }
});

test('a hold given back (a spare no request took) frees its slot and amount and returns its rpm token to the key\'s bucket, never above the limit', async (t) => {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const l = await redisLimiter(t, prefix);
  const r = new Redis(REDIS);
  t.after(() => r.quit());
  const at = (id, rpm) => l.admit({ holdId: id, accountId: 'g', keyId: 'k', rpm, concurrency: 2, money: true, hold: 4_000n,
    balance: { amount: 10_000n, version: 1n }, ceiling: null, spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs: 60_000 });
  for (const id of ['a', 'b']) assert.equal((await at(id, 10)).ok, true);
  // Both slots taken: a third is refused.
  assert.equal((await at('c', 10)).reason, 'concurrency_limit_exceeded');
  const bucket = async () => Number(await r.hget(`${prefix}{g}:rpm:k`, 't'));
  const before = await bucket();
  assert.ok(before < 8.01 && before >= 8, `two tokens taken (${before})`);
  await l.giveBack('g', 'k', 'b', 10);
  const after = await bucket();
  assert.ok(after >= 9 && after < 9.01, `the token is back (${after})`);
  assert.equal(await l.openHolds('g'), 1, 'its slot is free');
  const c = await at('c', 10);
  assert.equal(c.ok, true, 'a request takes the freed slot and amount');
  assert.equal(c.remaining, 8, 'and the bucket counts it as the second request');
  // A hold already gone gives nothing back; a token given back never lifts the bucket over the limit.
  await l.giveBack('g', 'k', 'b', 10);
  assert.ok(await bucket() < 8.01, 'a hold given back twice returns one token');
  await l.release('g', 'a'); await l.release('g', 'c');
  assert.equal((await at('d', 10)).ok, true);
  await r.hset(`${prefix}{g}:rpm:k`, 't', '10');
  await l.giveBack('g', 'k', 'd', 10);
  assert.ok(await bucket() <= 10, 'capped at the limit');
  assert.equal(await l.openHolds('g'), 0);
});

// The limiter contract, on both limiters: holds count against the balance until released, and many
// releases in one event-loop turn (a group commit settling tens of requests) all land.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { MemoryLimiter } from '../dist/gate/limits/memory.js';
import { RedisLimiter } from '../dist/gate/limits/redis.js';
import { clearRedisPrefix } from './helpers/gateway.mjs';

const REDIS = process.env.TOLLGATE_TEST_REDIS ?? 'redis://127.0.0.1:6379';

async function limiters(t) {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const redis = new RedisLimiter(REDIS, prefix);
  await redis.ready();
  t.after(async () => { await redis.close(); await clearRedisPrefix(prefix); });
  return [new MemoryLimiter(), redis];
}

const admit = (l, accountId, requestId, hold, balance) => l.admit({
  requestId, accountId, keyId: `key_${accountId}`, rpm: 1_000_000, concurrency: 1_000, hold, balance,
  ceiling: null, periodSpent: 0n, ttlMs: 60_000,
});

test('holds take the balance until released, and a turn of releases over two accounts frees all of it', async (t) => {
  for (const l of await limiters(t)) {
    const balance = 10n * 1_000n;
    for (const acct of ['a', 'b']) {
      for (let i = 0; i < 10; i++) assert.equal((await admit(l, acct, `${acct}${i}`, 1_000n, balance)).ok, true, `${l.kind}: hold ${acct}${i}`);
      const full = await admit(l, acct, `${acct}-over`, 1_000n, balance);
      assert.deepEqual(full, { ok: false, reason: 'insufficient_balance' }, `${l.kind}: the holds use up the balance`);
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

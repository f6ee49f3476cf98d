// Two `serve` processes on one PostgreSQL and one Redis enforce one key's limits together.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startGateway, freshDatabase, clearRedisPrefix, bearer, chatBody, assertInvariants } from './helpers/gateway.mjs';

/** Two `serve` processes on one fresh PostgreSQL database and one Redis key prefix. */
async function twoInstances(t) {
  const db = await freshDatabase();
  const redisPrefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  t.after(async () => { await db.drop(); await clearRedisPrefix(redisPrefix); });
  return [await startGateway(t, { database: db, redis: true, redisPrefix }), await startGateway(t, { database: db, redis: true, redisPrefix })];
}

test('two instances share a key rpm budget and concurrency limit through Redis', async (t) => {
  const [a, b] = await twoInstances(t);
  const { key, account } = await a.account('10', { rpm: 10, concurrency: 2 });
  const started = Date.now();
  const statuses = [];
  for (let i = 0; i < 24; i++) {
    const gw = i % 2 ? b : a;
    const r = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() });
    statuses.push(r.status);
    await r.text();
  }
  const refills = Math.floor((Date.now() - started) / 6000);
  const ok = statuses.filter((s) => s === 200).length;
  assert.ok(ok >= 10 && ok <= 10 + refills, `${ok} admitted across both instances, budget 10 (+${refills} refilled)`);
  assert.equal(statuses.filter((s) => s === 429).length, 24 - ok);
  // both instances billed into one ledger
  await assertInvariants(assert, a, account);
  await assertInvariants(assert, b, account);
});

test('concurrency held on one instance counts on the other', async (t) => {
  const [a, b] = await twoInstances(t);
  const { key } = await a.account('10', { concurrency: 2 });
  const ctl = new AbortController();
  const hang = (gw) => gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'x-sim-hang': '1' }, body: chatBody(), signal: ctl.signal }).catch(() => undefined);
  const h1 = hang(a);
  const h2 = hang(b);
  let status;
  const until = Date.now() + 3000;
  do {
    await new Promise((r) => setTimeout(r, 50));
    const r = await b.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() });
    status = r.status;
    await r.text();
  } while (status !== 429 && Date.now() < until);
  assert.equal(status, 429);
  ctl.abort();
  await Promise.all([h1, h2]);
});

test('a key revoked through the CLI is refused by both instances within a second', async (t) => {
  const [a, b] = await twoInstances(t);
  const { key, prefix } = await a.account('10');
  for (const gw of [a, b]) {
    const r = await gw.fetch('/svc/v1/key', { headers: bearer(key) });
    assert.equal(r.status, 200, 'both instances know the key (and have cached it)');
    await r.text();
  }
  await a.cli('key', 'revoke', prefix);
  const revokedAt = Date.now();
  const refusedAfter = async (gw) => {
    for (;;) {
      const r = await gw.fetch('/svc/v1/key', { headers: bearer(key) });
      await r.text();
      if (r.status === 401) return Date.now() - revokedAt;
      assert.equal(r.status, 200);
      if (Date.now() - revokedAt > 5000) return Infinity;
      await new Promise((res) => setTimeout(res, 20));
    }
  };
  const [ma, mb] = await Promise.all([refusedAfter(a), refusedAfter(b)]);
  assert.ok(ma <= 1000 && mb <= 1000, `refused after ${ma} ms and ${mb} ms`);
});

// Known costs never take a balance below zero: a hold the available balance or the ceiling's remainder cannot cover is refused (402 with both figures).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startGateway, bearer, chatBody, assertInvariants, freshDatabase, dollarsToNano, clearRedisPrefix, REDIS_URL } from './helpers/gateway.mjs';
import { openPostgres } from '../dist/store/db.js';
import { Settler, serializeEntry } from '../dist/ledger/settle.js';
import { Committer } from '../dist/exchange/committer.js';
import { RedisLimiter } from '../dist/gate/limits/redis.js';
import { createAccount } from '../dist/store/accounts.js';

const LIMITERS = [{ name: 'in process', opts: { store: 'pglite' } }, { name: 'Redis', opts: { redis: true } }];
const json = (key) => ({ ...bearer(key), 'content-type': 'application/json' });
const tts = (gw, key, text) => gw.fetch('/beta/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb?output_format=pcm_24000',
  { method: 'POST', headers: { 'xi-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ text, model_id: 'eleven_multilingual_v2' }) });

for (const { name, opts } of LIMITERS) {
  test(`a $0.01 account asking 10,000 characters of speech gets 402 saying what it needs, and nothing is billed (${name})`, async (t) => {
    const gw = await startGateway(t, opts);
    const { key, account } = await gw.account('0.01');
    // sim-tts: $15 per million characters, so 10,000 characters cost $0.15.
    const res = await tts(gw, key, 'a'.repeat(10_000));
    assert.equal(res.status, 402);
    const body = await res.json();
    assert.equal(body.detail.status, 'insufficient_balance');
    assert.match(body.detail.message, /needs up to \$0\.15 \(150000000 nd\); \$0\.01 \(10000000 nd\) is available/);
    // A request the balance covers still runs, and the balance stays above zero.
    const ok = await tts(gw, key, 'a'.repeat(500));
    assert.equal(ok.status, 200);
    await ok.arrayBuffer();
    const show = await gw.cli('account', 'show', account);
    assert.equal(show.balance, 0.0025);
    await assertInvariants(assert, gw, account);
  });

  test(`a chat whose max_tokens worst case exceeds the balance gets 402; without max_tokens the spec's minimum applies (${name})`, async (t) => {
    const gw = await startGateway(t, opts);
    const { key, account } = await gw.account('0.01');
    // 4,096 output tokens at $2.50 per million: $0.01024 alone, more than the balance.
    let res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: json(key), body: chatBody({ max_tokens: 4096 }) });
    assert.equal(res.status, 402);
    const { error } = await res.json();
    assert.equal(error.code, 'insufficient_balance');
    assert.equal(error.type, 'insufficient_quota');
    assert.match(error.message, /needs up to \$0\.0102\d* \(\d+ nd\); \$0\.01 \(10000000 nd\) is available/);
    assert.equal((await gw.cli('account', 'show', account)).ledger_total, 0.01, 'nothing billed');
    res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: json(key), body: chatBody({ max_tokens: 40 }) });
    assert.equal(res.status, 200);
    await res.json();
    await assertInvariants(assert, gw, account);
  });

  test(`a known cost past the key's ceiling remainder gets 402 key_spend_limit_reached with the remainder (${name})`, async (t) => {
    const gw = await startGateway(t, opts);
    const { key, account } = await gw.account('10', { spendLimit: '0.01', period: 'daily' });
    const res = await tts(gw, key, 'a'.repeat(1_000));
    assert.equal(res.status, 402);
    const body = await res.json();
    assert.equal(body.detail.status, 'key_spend_limit_reached');
    assert.match(body.detail.message, /needs up to \$0\.015 \(15000000 nd\); \$0\.01 \(10000000 nd\) is available under the daily spend limit/);
    assert.equal((await gw.cli('account', 'show', account)).balance, 10);
    await assertInvariants(assert, gw, account);
  });
}

test('limits.allow_overdraft admits a known cost on balance > 0 alone (the specification\'s minimum)', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', limits: { allow_overdraft: true } });
  const { key, account } = await gw.account('0.01');
  const res = await tts(gw, key, 'a'.repeat(10_000));
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const show = await gw.cli('account', 'show', account);
  assert.equal(show.balance, -0.14);
  // Now at or below zero: the next request is refused as before.
  assert.equal((await tts(gw, key, 'a')).status, 402);
  await assertInvariants(assert, gw, account);
});

test('known costs racing on two instances sharing PostgreSQL and Redis never take the balance below zero', async (t) => {
  const db = await freshDatabase();
  t.after(() => db.drop());
  const a = await startGateway(t, { redis: true, database: db });
  const b = await startGateway(t, { redis: true, database: db, redisPrefix: a.redisPrefix });
  const { key, account } = await a.account('0.01');
  // Each costs $0.006: the balance covers one, not two, whichever instance admits it.
  const replies = await Promise.all(Array.from({ length: 8 }, (_, i) => tts(i % 2 ? b : a, key, 'a'.repeat(400))));
  const statuses = await Promise.all(replies.map(async (r) => { await r.arrayBuffer(); return r.status; }));
  assert.deepEqual(statuses.filter((s) => s === 200).length, 1, `one admitted: ${statuses}`);
  assert.ok(statuses.every((s) => s === 200 || s === 402));
  const show = await a.cli('account', 'show', account);
  assert.equal(dollarsToNano(show.balance), 4_000_000n);
  await assertInvariants(assert, a, account);
});

test('a debit the ledger refuses (a 3,000-character key, text jsonb cannot store) is isolated: every other account\'s debit in its group commits (PostgreSQL + Redis)', async (t) => {
  const fresh = await freshDatabase();
  const db = await openPostgres(fresh.url, 4);
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const limiter = new RedisLimiter(REDIS_URL, prefix);
  await limiter.ready();
  t.after(async () => { await limiter.close(); await clearRedisPrefix(prefix); await db.close(); await fresh.drop(); });
  const settler = new Settler(db, { balance() {}, spend() {} });
  const committer = new Committer(settler, limiter, db);
  const [bad, good] = [await createAccount(db, 'bad@example.com'), await createAccount(db, 'good@example.com')];
  for (const a of [bad, good]) await settler.submit({ idemKey: `credit:${a.id}`, nonce: 'c', accountId: a.id, keyId: null, kind: 'credit', amount: 1_000_000n, reason: 'test' });
  const month = new Date().toISOString().slice(0, 7) + '-01';
  const debits = [];
  const add = (account, idemKey, amount, usage = { tokens: 1 }) => debits.push({ account, entry: { idemKey, nonce: 'n', accountId: account.id, keyId: null, kind: 'debit', amount, reason: 'test', usage, at: new Date() } });
  // Below validation: a key past PostgreSQL's btree limit (2,704 bytes) and a NUL jsonb refuses, among 200 honest debits.
  add(bad, `batch:b1:${randomBytes(1500).toString('hex')}`, 1_000n); // random: a repeated character would compress under the limit
  add(bad, 'req_nul', 2_000n, { note: 'a\u0000b' });
  for (let i = 0; i < 200; i++) add(good, `req_${i}`, 10n);
  let n = 0;
  for (const d of debits) {
    const holdId = `h${n++}`;
    const ok = await limiter.admit({ holdId, accountId: d.account.id, keyId: 'k', rpm: 1e6, concurrency: 1e6, money: true, hold: d.entry.amount,
      balance: { amount: 1_000_000n, version: 1n }, ceiling: null, spent: { period: 'month', start: month, amount: 0n, version: 1n }, ttlMs: 60_000 });
    assert.equal(ok.ok, true);
    d.pending = { id: holdId, accountId: d.account.id, keyId: 'k', amount: d.entry.amount, entry: serializeEntry(d.entry) };
    await limiter.settle(holdId, d.pending, true);
  }
  // All in one turn: one group commit carries the bad ones with the good ones.
  for (const d of debits) committer.enqueue(d.pending, d.entry);
  const until = Date.now() + 30_000;
  while (committer.pending > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
  assert.equal(committer.pending, 0, 'every debit left the committer');
  const sum = async (id) => (await db.query('SELECT balance_nd, (SELECT count(*)::int FROM ledger WHERE account_id = $1 AND kind = \'debit\') AS n FROM accounts WHERE id = $1', [id])).rows[0];
  const g = await sum(good.id);
  assert.equal(g.n, 200, 'the other account\'s 200 debits committed');
  assert.equal(g.balance_nd, 1_000_000n - 2_000n);
  const b = await sum(bad.id);
  assert.equal(b.n, 1, 'the long key is stored under its hash');
  assert.equal(b.balance_nd, 1_000_000n - 1_000n);
  const hashed = await db.query('SELECT idem_key FROM ledger WHERE account_id = $1 AND kind = \'debit\'', [bad.id]);
  assert.match(hashed.rows[0].idem_key, /^sha256:[0-9a-f]{64}$/);
  const parked = await db.query('SELECT amount_nd, entry, error FROM parked_debits WHERE account_id = $1', [bad.id]);
  assert.equal(parked.rows.length, 1, 'the debit jsonb refuses is parked');
  assert.equal(BigInt(parked.rows[0].amount_nd), 2000n);
  assert.equal(JSON.parse(parked.rows[0].entry).idemKey, 'req_nul');
  assert.equal(committer.parked, 1);
  for (const a of [bad, good]) assert.deepEqual(await limiter.pendingOf(a.id, 'k'), { account: 0n, key: 0n }, 'nothing left pending in Redis');
});

// Faults under load: Redis killed, PostgreSQL stopped, two instances taking turns. After recovery every
// served request is billed exactly once, nothing is billed without a request, balances equal their ledger,
// ceilings are passed by at most one request, no hold is left and nothing is logged as unhandled.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from '../node_modules/pg/lib/index.js';
import { Redis } from '../node_modules/ioredis/built/index.js';
import { startGateway, freshDatabase, clearRedisPrefix, bearer, chatBody, priceNano } from './helpers/gateway.mjs';
import { privateRedis, privatePostgres } from './helpers/stores.mjs';
import { burstsOnTwo } from './helpers/bursts.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Loops of buffered chat requests, each with its own x-request-id, until `until`. */
async function load(gw, key, loops, until, records) {
  await Promise.all(Array.from({ length: loops }, async (_, l) => {
    for (let n = 0; Date.now() < until; n++) {
      const id = `fault-${l}-${n}-${randomBytes(4).toString('hex')}`;
      const rec = { id, status: 0, code: null, retryAfter: null, usage: null };
      try {
        const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'x-request-id': id }, body: chatBody({ max_tokens: 8 }) });
        rec.status = res.status;
        rec.retryAfter = res.headers.get('retry-after');
        const j = await res.json();
        if (res.status === 200) rec.usage = j.usage; else rec.code = j.error?.code;
      } catch (e) { rec.code = String(e?.cause?.code ?? e); }
      records.push(rec);
      if (rec.status !== 200) await sleep(20);
    }
  }));
}

async function ledgerOf(url, account) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const rows = (await c.query("SELECT idem_key, amount_nd FROM ledger WHERE account_id = $1 AND kind = 'debit'", [account])).rows;
    const bal = (await c.query('SELECT balance_nd, (SELECT sum(amount_nd) FROM ledger WHERE account_id = $1)::bigint AS total FROM accounts WHERE id = $1', [account])).rows[0];
    return { rows, balance: BigInt(bal.balance_nd), total: BigInt(bal.total) };
  } finally { await c.end(); }
}

async function metric(gw, name) {
  return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(await (await gw.fetch('/metrics')).text())?.[1]);
}

async function until(what, fn, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) { if (await fn()) return; await sleep(100); }
  assert.fail(`timed out waiting for ${what}`);
}

/** Every 200 billed exactly once at its price, no debit without a request. */
function assertBilledOnce(records, ledger) {
  const served = records.filter((r) => r.status === 200);
  const byId = new Map();
  for (const row of ledger.rows) byId.set(row.idem_key, [...(byId.get(row.idem_key) ?? []), BigInt(row.amount_nd)]);
  const unbilled = served.filter((r) => (byId.get(r.id) ?? []).length !== 1).map((r) => r.id);
  assert.deepEqual(unbilled.slice(0, 10), [], `${unbilled.length} served requests without exactly one debit`);
  const wrong = served.filter((r) => -byId.get(r.id)[0] !== priceNano(r.usage.prompt_tokens, r.usage.completion_tokens)).map((r) => r.id);
  assert.deepEqual(wrong.slice(0, 10), [], 'each debit is the price of the usage the client was told');
  const sent = new Set(records.map((r) => r.id));
  const stray = ledger.rows.filter((r) => !sent.has(r.idem_key)).map((r) => r.idem_key);
  assert.deepEqual(stray.slice(0, 10), [], 'no debit without a request');
  const refused = records.filter((r) => r.status !== 200 && byId.has(r.id)).map((r) => r.id);
  assert.deepEqual(refused.slice(0, 10), [], 'no refused request is billed');
  assert.equal(ledger.balance, ledger.total, 'balance equals the sum of the ledger');
}

test('Redis killed mid-load: admission fails closed with 503 + Retry-After, never 500, and every served request is billed once', { timeout: 120_000 }, async (t) => {
  const redis = await privateRedis(t);
  const db = await freshDatabase();
  t.after(() => db.drop());
  const gw = await startGateway(t, { store: 'postgres', database: db, redis: true, redisPrefix: `tgfault:${randomBytes(4).toString('hex')}:`, redisUrl: redis.url });
  const { key, account } = await gw.account('20', { rpm: 1_000_000, concurrency: 1000 });
  const records = [];
  const t0 = Date.now();
  const running = load(gw, key, 8, t0 + 7000, records);
  await sleep(1500);
  redis.kill();
  const killedAt = records.length;
  await sleep(2500);
  await redis.start();
  await running;
  const during = records.slice(killedAt);
  const statuses = [...new Set(records.map((r) => r.status))].sort();
  t.diagnostic(`statuses ${JSON.stringify(statuses)}; ${records.filter((r) => r.status === 503).length} refused with 503 of ${records.length}`);
  assert.ok(!records.some((r) => r.status === 500 || r.status === 502), 'no 500 or 502');
  const refused = records.filter((r) => r.status !== 200);
  assert.ok(refused.length > 0, 'the outage was seen');
  for (const r of refused) {
    assert.equal(r.status, 503, `${r.id}: ${r.code}`);
    assert.ok(['limits_unavailable'].includes(r.code), r.code);
    assert.ok(Number(r.retryAfter) >= 1, 'Retry-After says when');
  }
  assert.ok(during.slice(-20).every((r) => r.status === 200), 'served again once Redis is back');
  await until('every debit committed and every hold released', async () => (await metric(gw, 'tollgate_pending_debits')) === 0 && (await metric(gw, 'tollgate_open_holds')) === 0);
  const r = new Redis(redis.url);
  r.on('error', () => undefined);
  t.after(() => r.quit());
  const holdsKey = `${gw.redisPrefix}{${account}}:holds`;
  try {
    await until('no hold left in Redis', async () => (await r.hlen(holdsKey)) === 0);
  } catch (e) {
    const left = Object.keys(await r.hgetall(holdsKey)).map((h) => h.split('/')[0]);
    t.diagnostic(`requests: ${JSON.stringify(records.filter((x) => left.includes(x.id)))}`);
    t.diagnostic(`left: ${JSON.stringify(await r.hgetall(holdsKey))} sum ${JSON.stringify(await r.hgetall(`${gw.redisPrefix}{${account}}:holdsum`))}`);
    throw e;
  }
  await gw.stop();
  assertBilledOnce(records, await ledgerOf(db.url, account));
  assert.doesNotMatch(gw.output.stdout, /unhandled/i);
});

test('PostgreSQL stopped mid-load: requests keep being served and billed once PostgreSQL returns, exactly once', { timeout: 120_000 }, async (t) => {
  const pgc = await privatePostgres(t);
  const prefix = `tgfault:${randomBytes(4).toString('hex')}:`;
  t.after(() => clearRedisPrefix(prefix));
  const gw = await startGateway(t, { store: 'postgres', database: { url: pgc.url }, redis: true, redisPrefix: prefix });
  const { key, account } = await gw.account('20', { rpm: 1_000_000, concurrency: 1000 });
  // the account and key are in memory once used
  assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody({ max_tokens: 4 }) })).status, 200);
  const records = [];
  const running = load(gw, key, 8, Date.now() + 7000, records);
  await sleep(1500);
  pgc.stop();
  await sleep(3000);
  const pendingDuring = await metric(gw, 'tollgate_pending_debits');
  pgc.start();
  await running;
  t.diagnostic(`${records.length} requests, statuses ${JSON.stringify([...new Set(records.map((r) => r.status))])}; ${pendingDuring} debits pending while PostgreSQL was down`);
  assert.ok(pendingDuring > 0, 'debits waited for PostgreSQL');
  assert.ok(records.every((r) => r.status === 200), `every request served: ${JSON.stringify(records.filter((r) => r.status !== 200).slice(0, 3))}`);
  await until('every debit committed', async () => (await metric(gw, 'tollgate_pending_debits')) === 0, 30_000);
  assert.ok(await metric(gw, 'tollgate_debit_commit_failures_total') > 0, 'the failed commits are counted for operators');
  assert.equal(await metric(gw, 'tollgate_retrying_debits'), 0, 'and none is still retrying');
  await gw.stop();
  const ledger = await ledgerOf(pgc.url, account);
  // the warm-up request is in the ledger too, under its own id
  assertBilledOnce(records, { ...ledger, rows: ledger.rows.filter((r) => r.idem_key.startsWith('fault-')) });
  assert.doesNotMatch(gw.output.stdout, /unhandled/i);
});

test('two instances taking turns in bursts pass a balance and a ceiling by at most one request', { timeout: 120_000 }, async (t) => {
  const db = await freshDatabase();
  const prefix = `tgfault:${randomBytes(4).toString('hex')}:`;
  t.after(async () => { await clearRedisPrefix(prefix); await db.drop(); });
  const a = await startGateway(t, { store: 'postgres', database: db, redis: true, redisPrefix: prefix });
  const b = await startGateway(t, { store: 'postgres', database: db, redis: true, redisPrefix: prefix });
  const { poor, capped } = await burstsOnTwo(t, a, b);
  await until('debits committed on both', async () => (await metric(a, 'tollgate_pending_debits')) === 0 && (await metric(b, 'tollgate_pending_debits')) === 0);
  for (const acct of [poor, capped]) {
    const l = await ledgerOf(db.url, acct.account);
    assert.equal(l.balance, l.total);
  }
});

// A store down: the gateway answers 503 with Retry-After in each family's envelope, never 401 or 402, fails readiness, and recovers. Uses a PostgreSQL and a Redis of its own.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startGateway, bearer, chatBody } from './helpers/gateway.mjs';
import { privatePostgres, privateRedis } from './helpers/stores.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const madeUp = () => `svc_live_${randomBytes(24).toString('hex')}`;

async function waitReady(gw, want) {
  for (let i = 0; i < 150; i++) {
    const r = await gw.fetch('/readyz');
    await r.arrayBuffer();
    if (r.status === want) return;
    await sleep(100);
  }
  assert.fail(`/readyz never answered ${want}`);
}

const chat = (gw, key) => gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody({ max_tokens: 8 }) });
const user = (gw, key) => gw.fetch('/beta/v1/user', { headers: { 'xi-api-key': key } });

/** A 503 with Retry-After, in the alpha envelope (`error.code`) or the beta one (`detail.status`). */
async function assertOutage(res, family, code, what) {
  const body = await res.json();
  assert.equal(res.status, 503, `${what}: ${JSON.stringify(body)}`);
  assert.ok(Number(res.headers.get('retry-after')) >= 1, `${what}: Retry-After`);
  if (family === 'alpha') assert.equal(body.error.code, code, what);
  else { assert.equal(body.detail.status, code, what); assert.equal(body.error.code, code, what); }
}

test('with PostgreSQL stopped and then Redis stopped, keys and money get 503 + Retry-After (never 401 or 402) until they return', { timeout: 180_000 }, async (t) => {
  const pg = await privatePostgres(t);
  const redis = await privateRedis(t);
  const gw = await startGateway(t, { store: 'postgres', database: { url: pg.url }, redis: true, redisUrl: redis.url, redisPrefix: `tgoutage:${randomBytes(4).toString('hex')}:`, status: { probe_ms: 200 } });
  const used = await gw.account('5', { scopes: 'llm,voice' });
  const fresh = await gw.account('5');
  const broke = await gw.account('0');
  assert.equal((await chat(gw, used.key)).status, 200, 'a key in use before the outage');
  assert.equal((await chat(gw, broke.key)).status, 402, 'an empty balance is 402 while the stores are up');
  assert.equal((await chat(gw, madeUp())).status, 401, 'a made-up key is 401 while the stores are up');
  await waitReady(gw, 200);

  // PostgreSQL stopped.
  pg.stop();
  await waitReady(gw, 503);
  const rz = await (await gw.fetch('/readyz')).json();
  assert.match(rz.reason, /PostgreSQL/);
  await assertOutage(await chat(gw, madeUp()), 'alpha', 'store_unavailable', 'a made-up key (alpha)');
  await assertOutage(await user(gw, madeUp()), 'beta', 'store_unavailable', 'a made-up key (beta)');
  await assertOutage(await chat(gw, fresh.key), 'alpha', 'store_unavailable', 'a valid key whose balance is not in memory');
  await assertOutage(await chat(gw, broke.key), 'alpha', 'store_unavailable', 'an empty balance is not called empty while the ledger cannot be read');
  // What memory holds still serves (docs/reliability.md): the debit waits, durable in Redis.
  assert.equal((await chat(gw, used.key)).status, 200, 'a key and balance in memory are still served');
  const health = await gw.fetch('/healthz');
  assert.equal(health.status, 503);
  assert.equal((await health.json()).checks['postgresql:connection'][0].status, 'fail');
  const st = await (await gw.fetch('/svc/v1/status')).json();
  const byId = Object.fromEntries(st.components.map((c) => [c.id, c]));
  assert.equal(byId.authentication.status, 'degraded_performance');
  assert.notEqual(byId['billing-ledger'].status, 'operational');
  assert.notEqual(st.status.indicator, 'none');

  pg.start();
  await waitReady(gw, 200);
  assert.equal((await chat(gw, madeUp())).status, 401, 'a made-up key is 401 again');
  assert.equal((await chat(gw, fresh.key)).status, 200, 'the fresh key is served once PostgreSQL is back');
  assert.equal((await chat(gw, broke.key)).status, 402, 'and an empty balance is 402 again');

  // Redis stopped.
  redis.kill();
  await waitReady(gw, 503);
  await assertOutage(await chat(gw, used.key), 'alpha', 'limits_unavailable', 'a valid key (alpha)');
  await assertOutage(await user(gw, used.key), 'beta', 'limits_unavailable', 'a valid key (beta)');
  await assertOutage(await chat(gw, madeUp()), 'alpha', 'limits_unavailable', 'a made-up key (alpha)');
  await assertOutage(await user(gw, madeUp()), 'beta', 'limits_unavailable', 'a made-up key (beta)');
  await assertOutage(await chat(gw, broke.key), 'alpha', 'limits_unavailable', 'an empty balance');
  const st2 = await (await gw.fetch('/svc/v1/status')).json();
  assert.equal(st2.components.find((c) => c.id === 'billing-ledger').status, 'major_outage');
  assert.equal(st2.status.indicator, 'critical');

  await redis.start();
  await waitReady(gw, 200);
  let back = 0;
  for (let i = 0; i < 50 && back !== 200; i++) { back = (await chat(gw, used.key)).status; if (back !== 200) await sleep(200); }
  assert.equal(back, 200, 'served again once Redis is back');
  assert.equal((await user(gw, madeUp())).status, 401, 'a made-up key is 401 again');
});

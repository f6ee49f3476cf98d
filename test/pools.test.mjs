// Upstream pools (issue 27) end to end: failover when an upstream dies, the retry rule, upstream protection, health, and opt-in model fallback.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startGateway, bearer, chatBody, assertInvariants, priceNano, dollarsToNano } from './helpers/gateway.mjs';
import { spawnSim, startStub, errorReply, refusedUrl } from './helpers/stub-upstream.mjs';
// The pick, the streamed-body rule and the config are tested in process: test/pool-pick.test.mjs.
import { startSim } from '../dist/sim/index.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const chat = (id, upstream, extra = {}) => ({ id, upstream, ...(id.startsWith('sim-') ? {} : { upstream_model: 'sim-chat' }), kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096, ...extra });
// Probes off unless a test turns them on: a sim counts them among its requests.
const up = (url, extra = {}) => ({ base_url: url, forward_headers: ['x-sim-*'], ...extra, health: { probe_interval_ms: 0, ...extra.health } });

async function balanceNano(gw, account) {
  return dollarsToNano((await gw.cli('account', 'show', account)).balance);
}

function post(gw, key, body, headers = {}, signal) {
  return gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), ...headers }, body, signal });
}

async function metrics(gw) {
  return (await gw.fetch('/metrics')).text();
}

function metric(text, name, upstream) {
  const m = new RegExp(`^${name}\\{upstream="${upstream}"\\} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : undefined;
}

test('one of two upstreams killed -9 under load: no client error after the detection window, every success billed once, the ledger exact', { timeout: 120_000 }, async (t) => {
  const a = await spawnSim(t);
  const b = await spawnSim(t);
  const gw = await startGateway(t, {
    store: 'postgres',
    upstreams: { a: up(a.url, { health: { eject_ms: 60_000 } }), b: up(b.url, { health: { eject_ms: 60_000 } }) },
    models: [chat('sim-chat', ['a', 'b'])],
  });
  const { key, account } = await gw.account('20');
  const records = [];
  const started = Date.now();
  let killedAt = 0;
  const until = started + 4000;
  setTimeout(() => { killedAt = Date.now(); a.kill(); }, 1500);
  await Promise.all(Array.from({ length: 6 }, async (_, l) => {
    for (let n = 0; Date.now() < until; n++) {
      const id = `pool-${l}-${n}-${randomBytes(4).toString('hex')}`;
      const rec = { id, at: Date.now(), status: 0, usage: null };
      try {
        const res = await post(gw, key, chatBody({ max_tokens: 8 }), { 'x-request-id': id, 'x-sim-token-delay-ms': '5' });
        rec.status = res.status;
        const j = await res.json();
        if (res.status === 200) rec.usage = j.usage; else rec.code = j.error?.code;
      } catch (e) { rec.code = String(e?.cause?.code ?? e); }
      records.push(rec);
    }
  }));
  assert.ok(killedAt > 0);
  // The detection window: requests in flight on the killed upstream when it died may fail (their work was under way).
  const after = records.filter((r) => r.at > killedAt + 200);
  assert.ok(after.length > 20, `${after.length} requests after the window`);
  assert.deepEqual(after.filter((r) => r.status !== 200).map((r) => `${r.status} ${r.code}`), [], 'no client error after the detection window');
  assert.ok(records.filter((r) => r.at < killedAt && r.status === 200).length > 10, 'both upstreams served before the kill');
  const m = await metrics(gw);
  assert.equal(metric(m, 'tollgate_upstream_healthy', 'a'), 0, 'the killed upstream is ejected');
  assert.equal(metric(m, 'tollgate_upstream_healthy', 'b'), 1);
  // Every 200 billed once at the price of the usage it reported; nothing else billed. The ledger commit
  // follows the response: it is read once the debits the clients were answered for have landed.
  await gw.debitsLanded();
  const c = new pg.Client({ connectionString: gw.db.url });
  await c.connect();
  try {
    const rows = (await c.query("SELECT idem_key, amount_nd FROM ledger WHERE account_id = $1 AND kind = 'debit'", [account])).rows;
    const byId = new Map();
    for (const r of rows) byId.set(r.idem_key, [...(byId.get(r.idem_key) ?? []), -BigInt(r.amount_nd)]);
    for (const r of records) {
      if (r.status === 200) assert.deepEqual(byId.get(r.id), [priceNano(r.usage.prompt_tokens, r.usage.completion_tokens)], `${r.id} billed once at its price`);
      else assert.equal(byId.get(r.id), undefined, `${r.id} (${r.status} ${r.code}) is not billed`);
    }
    assert.equal(rows.length, records.filter((r) => r.status === 200).length, 'no debit without a served request');
  } finally { await c.end(); }
  await assertInvariants(assert, gw, account);
});

test('an upstream answering 429 or 503 before any output is retried on the other and billed once; a 502 is not retried', { timeout: 60_000 }, async (t) => {
  const stub = await startStub(t);
  const sim = await startSim();
  t.after(() => sim.close());
  const gw = await startGateway(t, {
    store: 'pglite',
    upstreams: { bad: up(stub.url, { health: { eject_after: 10, probe_interval_ms: 0 } }), good: up(sim.url) },
    models: [chat('sim-chat', [{ name: 'bad', priority: 0 }, { name: 'good', priority: 1 }])],
  });
  const { key, account } = await gw.account('2');
  // 502: the host may have done the work, so the request is not sent again.
  stub.reply = errorReply(502);
  let res = await post(gw, key, chatBody({ seed: 1 }));
  assert.equal(res.status, 502);
  assert.equal((await res.json()).error.code, 'upstream_error');
  assert.equal(sim.stats().requests, 0, 'a 502 is not retried');
  assert.equal(await balanceNano(gw, account), dollarsToNano('2'), 'a failed request bills nothing');
  // 503, then 429: nothing was generated, the other upstream answers, billed once.
  let before = await balanceNano(gw, account);
  for (const [n, reply] of [[1, errorReply(503)], [2, errorReply(429, { 'retry-after': '30' })]]) {
    stub.reply = reply;
    res = await post(gw, key, chatBody({ seed: 1 }));
    assert.equal(res.status, 200);
    const j = await res.json();
    assert.equal(j.model, 'sim-chat');
    assert.equal(sim.stats().requests, n);
    const now = await balanceNano(gw, account);
    assert.equal(before - now, priceNano(j.usage.prompt_tokens, j.usage.completion_tokens), 'billed once, for the attempt that answered');
    before = now;
  }
  assert.equal(stub.count('POST'), 3);
  // The 429's Retry-After pauses the upstream: the next request goes straight to the other.
  res = await post(gw, key, chatBody({ seed: 2 }));
  assert.equal(res.status, 200);
  assert.equal(stub.count('POST'), 3, 'a paused upstream is not sent requests');
  assert.equal(metric(await metrics(gw), 'tollgate_upstream_retries_total', 'bad'), 2);
  await assertInvariants(assert, gw, account);
});

test('a stream cut mid-way by its upstream is not retried and is billed for what it produced', { timeout: 60_000 }, async (t) => {
  const first = await startSim();
  const second = await startSim();
  t.after(() => Promise.all([first.close(), second.close()]));
  const gw = await startGateway(t, {
    store: 'pglite',
    upstreams: { first: up(first.url), second: up(second.url) },
    models: [chat('sim-chat', [{ name: 'first', priority: 0 }, { name: 'second', priority: 1 }])],
  });
  const { key, account } = await gw.account('2');
  const full = await (await post(gw, key, chatBody({ seed: 5, max_tokens: 40 }))).json();
  const afterFull = await balanceNano(gw, account);
  const res = await post(gw, key, chatBody({ seed: 5, max_tokens: 40, stream: true }), { 'x-sim-truncate-after': '6' });
  assert.equal(res.status, 200);
  await assert.rejects(res.text(), 'the client sees its stream cut short');
  let now = afterFull;
  for (let i = 0; i < 50 && now === afterFull; i++) { await sleep(100); now = await balanceNano(gw, account); }
  const charged = afterFull - now;
  assert.ok(charged > priceNano(full.usage.prompt_tokens, 0), `charged ${charged} covers the prompt and some output`);
  assert.ok(charged < priceNano(full.usage.prompt_tokens, full.usage.completion_tokens), `charged ${charged} is less than the whole reply`);
  assert.equal(second.stats().requests, 0, 'never retried after the first byte');
  await assertInvariants(assert, gw, account);
});

test('an upstream at max_concurrency: a request waits in its queue, past the queue it gets 503 upstream_busy with Retry-After, and a pool spills to its other upstream', { timeout: 60_000 }, async (t) => {
  const sim = await startSim();
  const other = await startSim();
  t.after(() => Promise.all([sim.close(), other.close()]));
  const gw = await startGateway(t, {
    store: 'pglite',
    upstreams: {
      patient: up(sim.url, { max_concurrency: 1, queue_ms: 10_000 }),
      strict: up(sim.url, { max_concurrency: 1, queue_ms: 200 }),
      spill: up(sim.url, { max_concurrency: 1 }), other: up(other.url),
    },
    models: [chat('m-queue', 'patient'), chat('m-busy', 'strict'), chat('m-pool', [{ name: 'spill', priority: 0 }, { name: 'other', priority: 1 }])],
  });
  const { key, account } = await gw.account('5');
  const slow = { 'x-sim-token-delay-ms': '100' };
  const body = (model) => JSON.stringify({ model, max_tokens: 12, messages: [{ role: 'user', content: 'hi' }] });
  // Queue: the second request waits for the first to finish, then is served.
  let t0 = Date.now();
  const [q1, q2] = await Promise.all([post(gw, key, body('m-queue'), slow), sleep(100).then(() => post(gw, key, body('m-queue'), slow))]);
  assert.deepEqual([q1.status, q2.status], [200, 200]);
  assert.ok(Date.now() - t0 >= 2 * 12 * 100 * 0.9, 'the second ran after the first');
  // Busy: past queue_ms, 503 upstream_busy with Retry-After; nothing billed for it.
  const before = await balanceNano(gw, account);
  const held = post(gw, key, body('m-busy'), slow);
  await sleep(150);
  t0 = Date.now();
  const busy = await post(gw, key, body('m-busy'));
  assert.equal(busy.status, 503);
  assert.ok(Number(busy.headers.get('retry-after')) >= 1, 'Retry-After is set');
  assert.equal((await busy.json()).error.code, 'upstream_busy');
  assert.ok(Date.now() - t0 >= 150, 'it waited in the queue first');
  const held1 = await (await held).json();
  assert.equal(before - (await balanceNano(gw, account)), priceNano(held1.usage.prompt_tokens, held1.usage.completion_tokens), 'only the served request is billed');
  // Spill: the best upstream is full, the other priority takes the request at once.
  const occupying = post(gw, key, body('m-pool'), slow);
  await sleep(150);
  t0 = Date.now();
  const spilled = await post(gw, key, body('m-pool'));
  assert.equal(spilled.status, 200);
  assert.ok(Date.now() - t0 < 600, 'served without waiting for the full upstream');
  assert.equal(other.stats().requests, 1, 'the other upstream served it');
  assert.equal((await occupying).status, 200);
  assert.equal(metric(await metrics(gw), 'tollgate_upstream_busy_total', 'strict'), 1);
  await assertInvariants(assert, gw, account);
});

test('health: a probe (GET /v1/models, never a generation) ejects a failing upstream and readmits it; after a passive ejection one trial request readmits it', { timeout: 60_000 }, async (t) => {
  const stub = await startStub(t);
  const flaky = await startStub(t);
  const sim = await startSim();
  t.after(() => sim.close());
  stub.reply = (req, res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"object":"list","data":[]}'); };
  const gw = await startGateway(t, {
    store: 'pglite',
    upstreams: {
      probed: up(stub.url, { health: { probe_interval_ms: 100, eject_after: 2 } }),
      flaky: up(flaky.url, { health: { probe_interval_ms: 0, eject_after: 1, eject_ms: 400 } }),
      good: up(sim.url, { health: { probe_interval_ms: 0 } }),
    },
    models: [chat('m-probed', [{ name: 'probed', priority: 1 }, { name: 'good', priority: 0 }]),
      chat('m-flaky', [{ name: 'flaky', priority: 0 }, { name: 'good', priority: 1 }])],
  });
  const { key, account } = await gw.account('2');
  await sleep(600);
  assert.ok(stub.count('GET /v1/models') >= 3, `probed ${stub.count('GET /v1/models')} times`);
  assert.equal(stub.count('POST'), 0, 'a probe is never a generation');
  stub.reply = errorReply(500);
  await sleep(500);
  assert.equal(metric(await metrics(gw), 'tollgate_upstream_healthy', 'probed'), 0, 'failed probes eject it');
  stub.reply = (req, res) => { res.writeHead(200); res.end('{}'); };
  await sleep(500);
  assert.equal(metric(await metrics(gw), 'tollgate_upstream_healthy', 'probed'), 1, 'a probe that answers readmits it');
  // Passive: a 503 ejects (eject_after 1); for eject_ms every request goes to the other; then one trial readmits.
  flaky.reply = errorReply(503);
  assert.equal((await post(gw, key, JSON.stringify({ model: 'm-flaky', messages: [{ role: 'user', content: 'a' }] }))).status, 200);
  assert.equal(metric(await metrics(gw), 'tollgate_upstream_healthy', 'flaky'), 0);
  flaky.reply = (_req, res) => { res.writeHead(400, { 'content-type': 'application/json' }); res.end('{"error":{"message":"stub says no"}}'); };
  assert.equal((await post(gw, key, JSON.stringify({ model: 'm-flaky', messages: [{ role: 'user', content: 'b' }] }))).status, 200);
  assert.equal(flaky.count('POST'), 1, 'an ejected upstream is not sent requests');
  await sleep(450);
  const trial = await post(gw, key, JSON.stringify({ model: 'm-flaky', messages: [{ role: 'user', content: 'c' }] }));
  assert.equal(trial.status, 400, 'the trial request went to the readmitted upstream (which answered)');
  assert.equal(flaky.count('POST'), 2);
  assert.equal(metric(await metrics(gw), 'tollgate_upstream_healthy', 'flaky'), 1, 'one answered trial readmits it');
  await assertInvariants(assert, gw, account);
});

test('fallback to another model only when the request lists it in `models`: billed at the model that answered, which the reply names', { timeout: 60_000 }, async (t) => {
  const down = await refusedUrl();
  const gw = await startGateway(t, {
    store: 'pglite',
    upstreams: { sim: { sim: {} }, down: { base_url: down, continuous_usage_stats: true } },
    models: [chat('sim-chat', 'sim'), chat('big-chat', 'down', { input_per_mtok: '30', output_per_mtok: '60' })],
  });
  const { key, account } = await gw.account('2');
  const messages = [{ role: 'user', content: 'Say hello to the gateway.' }];
  let res = await post(gw, key, JSON.stringify({ model: 'big-chat', messages }));
  assert.equal(res.status, 502, 'no silent fallback');
  assert.equal((await res.json()).error.code, 'upstream_unavailable');
  assert.equal(await balanceNano(gw, account), dollarsToNano('2'));
  res = await post(gw, key, JSON.stringify({ model: 'big-chat', models: ['sim-chat'], messages }));
  assert.equal(res.status, 200);
  const j = await res.json();
  assert.equal(j.model, 'sim-chat', 'the reply names the model that answered');
  assert.equal(dollarsToNano('2') - await balanceNano(gw, account), priceNano(j.usage.prompt_tokens, j.usage.completion_tokens), 'billed at its prices');
  res = await post(gw, key, JSON.stringify({ model: 'big-chat', models: ['no-such-model'], messages }));
  assert.equal(res.status, 404);
  assert.equal((await res.json()).error.param, 'models');
  await assertInvariants(assert, gw, account);
});

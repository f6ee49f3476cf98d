// Two gateways on one PostgreSQL and a three-node Redis Cluster (started here): limits exact across them, every key in its hash slot, kill -9 loses no debit; and a gateway on a Sentinel's master.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from '../node_modules/pg/lib/index.js';
import { Cluster } from '../node_modules/ioredis/built/index.js';
import { startGateway, freshDatabase, bearer, chatBody } from './helpers/gateway.mjs';
import { startRedisCluster, startRedisSentinel } from './helpers/redis-cluster.mjs';
import { burstsOnTwo } from './helpers/bursts.mjs';
import { Redis } from '../node_modules/ioredis/built/index.js';
import { parseRedisUrl } from '../dist/gate/limits/redis-connect.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let cluster;
let client;
before(async () => {
  cluster = await startRedisCluster();
  client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })));
});
/** Cleanups of the pair the first two tests share (starting two gateways costs seconds on a busy machine). */
const shared = { fns: [], after(f) { this.fns.push(f); }, diagnostic() {} };
let pair;
after(async () => {
  for (const f of shared.fns.reverse()) await f();
  await client?.quit().catch(() => client.disconnect());
  await cluster?.stop();
});

/** Two `serve` processes on one fresh database and one key prefix on the cluster (dropped with the cluster). */
async function twoOnCluster(t, upstreams) {
  const db = await freshDatabase();
  t.after(() => db.drop());
  const redisPrefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const o = { store: 'postgres', database: db, redis: true, redisUrl: cluster.url, redisPrefix, ...(upstreams ? { upstreams } : {}) };
  const [a, b] = [await startGateway(t, o), await startGateway(t, o)];
  return { a, b, db, redisPrefix };
}

async function ledgerOf(url, account) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const rows = (await c.query("SELECT idem_key, amount_nd::text AS amount FROM ledger WHERE account_id = $1 AND kind = 'debit'", [account])).rows;
    const bal = (await c.query('SELECT balance_nd::text AS b, (SELECT coalesce(sum(amount_nd), 0) FROM ledger WHERE account_id = $1)::text AS total FROM accounts WHERE id = $1', [account])).rows[0];
    return { rows, balance: BigInt(bal.b), total: BigInt(bal.total) };
  } finally { await c.end(); }
}

/** Every key under the prefix on every master (a cluster SCAN is per node). */
async function keysUnder(prefix) {
  const out = [];
  for (const node of client.nodes('master')) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      out.push(...keys);
    } while (cursor !== '0');
  }
  return out;
}

test('on a Redis Cluster, two instances share one key\'s rpm budget, and every key sits in its account\'s slot or the registry\'s', async () => {
  pair = await twoOnCluster(shared);
  const { a, b, redisPrefix } = pair;
  const accounts = [await a.account('10', { rpm: 10, concurrency: 2 }), await a.account('10', { rpm: 10, tpm: 100_000 })];
  const started = Date.now();
  const statuses = [[], []];
  for (let i = 0; i < 24; i++) {
    await Promise.all(accounts.map(async (acct, j) => {
      const r = await (i % 2 ? b : a).fetch('/v1/chat/completions', { method: 'POST', headers: bearer(acct.key), body: chatBody({ max_tokens: 16 }) });
      statuses[j].push(r.status);
      await r.text();
    }));
  }
  const refills = Math.floor((Date.now() - started) / 6000);
  for (const s of statuses) {
    const ok = s.filter((x) => x === 200).length;
    assert.ok(ok >= 10 && ok <= 10 + refills, `${ok} admitted across both instances, budget 10 (+${refills} refilled): ${s}`);
    assert.equal(s.filter((x) => x === 429).length, 24 - ok, `every request not admitted is refused with 429: ${s}`);
  }
  const keys = await keysUnder(redisPrefix);
  const tags = new Set(keys.map((k) => /^[^{]*\{([^}]*)\}/.exec(k)?.[1]));
  assert.deepEqual([...tags].sort(), [...accounts.map((x) => x.account), 'registry'].sort(), `hash tags of ${keys.join(' ')}`);
  // the two accounts' keys on different nodes here or not, each account's keys in one slot
  for (const acct of accounts) {
    const slots = new Set(await Promise.all(keys.filter((k) => k.includes(`{${acct.account}}`)).map((k) => client.cluster('KEYSLOT', k))));
    assert.equal(slots.size, 1, `${acct.account}'s keys span slots ${[...slots]}`);
  }
  assert.ok(keys.some((k) => k.includes(':rpm:')) && keys.some((k) => k.includes(':q:')), `rpm and tpm buckets are among ${keys.join(' ')}`);
});

test('on a Redis Cluster, two instances taking turns in bursts pass a balance and a ceiling by at most one request', async (t) => {
  const { a, b, db } = pair ?? (pair = await twoOnCluster(shared));
  const { poor, capped, spentPoor, spentCapped } = await burstsOnTwo(t, a, b);
  for (const acct of [poor, capped]) {
    for (let i = 0; ; i++) {
      const l = await ledgerOf(db.url, acct.account);
      const billed = -l.rows.reduce((x, r) => x + BigInt(r.amount), 0n);
      if (billed === (acct === poor ? spentPoor : spentCapped) && l.balance === l.total) break;
      if (i > 100) assert.fail(`${acct.account}: ledger debits ${billed} nd vs served ${acct === poor ? spentPoor : spentCapped}; balance ${l.balance} vs ledger ${l.total}`);
      await sleep(100);
    }
  }
});

/** One request with its own id: `complete` once a 200 was read to the end ([DONE] for a stream), `content` once a stream sent text. */
async function oneRequest(gw, key, id, stream) {
  const rec = { id, stream, complete: false, content: false };
  try {
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { ...bearer(key), 'x-request-id': id },
      body: chatBody(stream ? { stream: true, max_tokens: 200, stream_options: { include_usage: true } } : { max_tokens: 16 }) });
    if (!stream || res.status !== 200) { await res.text(); rec.complete = res.status === 200; return rec; }
    const dec = new TextDecoder();
    for await (const chunk of res.body) {
      const s = dec.decode(chunk, { stream: true });
      if (/"content":"[^"]/.test(s)) rec.content = true;
      if (s.includes('data: [DONE]')) rec.complete = true;
    }
  } catch { /* cut by the kill */ }
  return rec;
}

test('on a Redis Cluster, a gateway killed with kill -9 under load loses no debit: each served request and each stream with output billed once, no hold left', async (t) => {
  const { a, b, db, redisPrefix } = await twoOnCluster(t, { sim: { sim: { token_delay_ms: 2 } } });
  const { account, key } = await a.account('50', { rpm: 100000, concurrency: 1000 });
  const records = [];
  for (const gw of [a, b]) records.push(await oneRequest(gw, key, `cl-warm-${randomBytes(6).toString('hex')}`, false));
  const started = Date.now();
  let killed = false;
  // The load runs 3 s, or longer on a slow machine until 60 requests are owed a debit (at most 30 s); the
  // kill comes after 1.5 s once 30 are owed, so it always lands under load.
  const owedSoFar = () => records.filter((r) => r.complete || r.content).length;
  const running = () => Date.now() < started + 30_000 && (Date.now() < started + 3000 || owedSoFar() < 60);
  const loops = (gw, n, tag) => Promise.all(Array.from({ length: n }, async (_, l) => {
    for (let i = 0; running() && !(gw === a && killed); i++) records.push(await oneRequest(gw, key, `cl-${tag}${l}-${i}-${randomBytes(4).toString('hex')}`, l % 2 === 1));
  }));
  const kill = async () => {
    await sleep(1500);
    while (owedSoFar() < 30 && Date.now() < started + 20_000) await sleep(50);
    killed = true; a.proc.kill('SIGKILL'); await a.exited;
  };
  await Promise.all([loops(a, 16, 'A'), loops(b, 4, 'B'), kill()]);
  const holds = `${redisPrefix}{${account}}:holds`;
  const pend = `${redisPrefix}{${account}}:pend`;
  const deadline = Date.now() + 20_000;
  while ((await client.hlen(holds)) + (await client.hlen(pend)) > 0) {
    assert.ok(Date.now() < deadline, `holds ${await client.hlen(holds)} and pending debits ${await client.hlen(pend)} left 20 s after the load`);
    await sleep(100);
  }
  await b.stop();
  const l = await ledgerOf(db.url, account);
  const byId = new Map();
  for (const r of l.rows) { const id = r.idem_key.split('~')[0]; byId.set(id, (byId.get(id) ?? 0) + 1); }
  const sent = new Set(records.map((r) => r.id));
  const owed = records.filter((r) => r.complete || r.content);
  t.diagnostic(`${records.length} requests, ${records.filter((r) => r.complete).length} complete, ${records.filter((r) => r.content && !r.complete).length} streams cut after output; ${l.rows.length} debits`);
  assert.ok(owed.length > 50, `load ran: ${owed.length} requests owed a debit`);
  assert.deepEqual(owed.filter((r) => byId.get(r.id) !== 1).map((r) => `${r.id}: ${byId.get(r.id) ?? 0}`), [], 'each served request or stream with output has exactly one debit');
  assert.deepEqual([...byId.keys()].filter((id) => !sent.has(id) || byId.get(id) !== 1), [], 'no debit without a request, none twice');
  assert.equal(l.balance, l.total, 'the balance equals the sum of the ledger');
});

test('the Redis URL: one server, a cluster\'s seed nodes, a sentinel group and its master name', () => {
  assert.equal(parseRedisUrl('redis://127.0.0.1:6379/2').mode, 'single');
  assert.deepEqual(parseRedisUrl('redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2'), {
    mode: 'cluster', nodes: [{ host: '10.0.0.1', port: 7000 }, { host: '10.0.0.2', port: 6379 }], name: undefined, tls: false, username: 'u', password: 'p@ss' });
  assert.deepEqual(parseRedisUrl('rediss+sentinel://:pw@s1:26379,s2/mymaster'), {
    mode: 'sentinel', nodes: [{ host: 's1', port: 26379 }, { host: 's2', port: 26379 }], name: 'mymaster', tls: true, username: undefined, password: 'pw' });
  assert.throws(() => parseRedisUrl('redis+sentinel://s1:26379'), /master name/);
  assert.throws(() => parseRedisUrl('redis+cluster://h:99999'), /bad port/);
});

test('through Redis Sentinel: the gateway finds the master the sentinel names, admits, and bills one debit per request', async (t) => {
  const s = await startRedisSentinel();
  t.after(() => s.stop());
  const db = await freshDatabase();
  t.after(() => db.drop());
  const redisPrefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const gw = await startGateway(t, { store: 'postgres', database: db, redis: true, redisUrl: s.url, redisPrefix });
  const { account, key } = await gw.account('10', { rpm: 3 });
  const statuses = [];
  for (let i = 0; i < 4; i++) { const r = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody({ max_tokens: 16 }) }); statuses.push(r.status); await r.text(); }
  assert.deepEqual(statuses, [200, 200, 200, 429], 'the rpm bucket on the master');
  const master = new Redis(`redis://127.0.0.1:${s.masterPort}`);
  const keys = await master.keys(`${redisPrefix}*`);
  await master.quit();
  assert.ok(keys.some((k) => k.startsWith(`${redisPrefix}{${account}}:rpm:`)), `the key's rpm bucket is on the master: ${keys.join(' ')}`);
  for (let i = 0; ; i++) {
    const l = await ledgerOf(db.url, account);
    if (l.rows.length === 3 && l.balance === l.total) break;
    assert.ok(i < 100, `3 debits expected, ledger has ${l.rows.length}; balance ${l.balance} vs ledger ${l.total}`);
    await sleep(100);
  }
});

test('on a Redis Cluster the scripts run as a Functions library (FCALL), loaded on every master; a master that lost it is served by EVALSHA at once and gets it again', async (t) => {
  const { RedisLimiter, FUNCTIONS_LIBRARY } = await import('../dist/gate/limits/redis.js');
  const libName = /name=(\S+)/.exec(FUNCTIONS_LIBRARY)[1];
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`; // dropped with the cluster
  const l = new RedisLimiter(cluster.url, prefix);
  t.after(() => l.close().catch(() => undefined));
  await l.ready();
  const masters = client.nodes('master');
  const loadedOn = async (node) => (await node.call('FUNCTION', 'LIST', 'LIBRARYNAME', libName)).length > 0;
  const loaded = async () => (await Promise.all(masters.map(loadedOn))).every(Boolean);
  assert.equal(masters.length, 3);
  assert.equal(await loaded(), true, 'the library is on every master once the limiter is ready');
  // One account whose slot each master serves.
  const accountOn = new Map();
  for (let i = 0; accountOn.size < masters.length && i < 1000; i++) {
    const slot = await client.cluster('KEYSLOT', `${prefix}{fc${i}}:holdsum`);
    if (!accountOn.has(client.slots[slot][0])) accountOn.set(client.slots[slot][0], `fc${i}`);
  }
  const month = new Date().toISOString().slice(0, 7) + '-01';
  const admit = (accountId, holdId, hold, o = {}) => l.admit({
    holdId, accountId, keyId: `key_${accountId}`, rpm: 1_000_000, concurrency: 1_000, money: true, hold,
    balance: { amount: 100_000n, version: 1n }, ceiling: null, spent: { period: 'month', start: month, amount: 0n, version: 1n }, ttlMs: 60_000, cover: o.cover,
  });
  // Admissions counted by the way they are sent. The client's auto-pipeline copies its methods (these
  // counters too) onto the pipeline it sends through, so only calls made on the client itself count.
  const n = { fcall: 0, evalsha: 0 };
  const { fcall, tg_eval_admit: byEval } = l.redis;
  l.redis.fcall = function (name, ...a) { if (this === l.redis && String(name).startsWith('tg_admit_')) n.fcall++; return fcall.call(this, name, ...a); };
  l.redis.tg_eval_admit = function (...a) { if (this === l.redis) n.evalsha++; return byEval.apply(this, a); };
  for (const acct of accountOn.values()) assert.equal((await admit(acct, `${acct}-0`, 1_000n)).ok, true);
  assert.deepEqual(n, { fcall: 3, evalsha: 0 }, 'an admission on each master, each by FCALL');
  // One master loses it (restarted with nothing on disk): its account's next admission is answered by
  // EVALSHA, under the same rule (the first hold still counts), and the library comes back there.
  const [addr, acct] = [...accountOn][0];
  const node = masters.find((m) => `${m.options.host}:${m.options.port}` === addr);
  await node.call('FUNCTION', 'DELETE', libName);
  assert.deepEqual(await admit(acct, `${acct}-1`, 99_001n, { cover: true }), { ok: false, reason: 'insufficient_balance', available: 99_000n });
  assert.deepEqual(n, { fcall: 4, evalsha: 1 });
  for (let i = 0; i < 50 && !(await loadedOn(node)); i++) await sleep(100);
  assert.equal(await loadedOn(node), true, 'loaded again on that master');
  for (const a of accountOn.values()) assert.equal((await admit(a, `${a}-2`, 10n)).ok, true);
  assert.deepEqual(n, { fcall: 7, evalsha: 1 }, 'FCALL again once it is back');
});

test('a cluster master lost (no replica): the accounts in its slots are refused with 503, the others still served, never a 500', async (t) => {
  const own = await startRedisCluster();
  t.after(() => own.stop());
  const db = await freshDatabase();
  t.after(() => db.drop());
  const gw = await startGateway(t, { store: 'postgres', database: db, redis: true, redisUrl: own.url, redisPrefix: `tgtest:${randomBytes(5).toString('hex')}:` });
  const accts = [];
  for (let i = 0; i < 6; i++) accts.push(await gw.account('10'));
  const probe = new Redis(`redis://127.0.0.1:${own.ports[0]}`);
  const slots = await probe.cluster('SLOTS');
  const portOf = async (a) => { const s = await probe.cluster('KEYSLOT', `{${a.account}}`); return slots.find(([lo, hi]) => s >= lo && s <= hi)[2][1]; };
  const ports = await Promise.all(accts.map(portOf));
  await probe.quit();
  const send = () => Promise.all(accts.map(async (a) => {
    const r = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(a.key), body: chatBody({ max_tokens: 8 }) });
    await r.text();
    return r.status;
  }));
  assert.deepEqual(await send(), accts.map(() => 200));
  const lost = ports[0];
  own.procs[own.ports.indexOf(lost)].kill('SIGKILL');
  await sleep(300);
  assert.deepEqual(await send(), ports.map((p) => (p === lost ? 503 : 200)), `accounts on ports ${ports}, ${lost} killed`);
});

// Two `serve` processes on one PostgreSQL and one Redis enforce one key's limits together; `workers: N` runs N on one port.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, readlinkSync, existsSync, mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGateway, freshDatabase, clearRedisPrefix, bearer, chatBody, assertInvariants, priceNano, dollarsToNano, CLI, TEST_MODELS } from './helpers/gateway.mjs';

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
  const hang = (gw) => gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'x-sim-hang': '1' }, body: chatBody({ stream: true }), signal: ctl.signal }).catch(() => undefined);
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

/** The pids of a process's children (cluster workers). */
function childrenOf(pid) {
  return readdirSync('/proc').filter((d) => /^\d+$/.test(d)).filter((d) => {
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid;
    } catch { return false; }
  }).map(Number);
}

/** How many established connections to `port` each pid holds (the server side of the client's sockets). */
function connectionsByPid(pids, port) {
  const inodes = new Set();
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length > 9 && parseInt(f[1].split(':')[1], 16) === port && f[3] === '01') inodes.add(f[9]);
  }
  return pids.map((pid) => readdirSync(`/proc/${pid}/fd`).filter((fd) => {
    try { return inodes.has(/^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1]); } catch { return false; }
  }).length);
}

test('workers: 2 serves one port from two processes that bill one ledger exactly, and replaces a dead worker', async (t) => {
  const gw = await startGateway(t, { redis: true, workers: 2 });
  const workers = childrenOf(gw.proc.pid);
  assert.equal(workers.length, 2, `two worker processes under the primary, got ${workers}`);
  const { key, account } = await gw.account('10');
  const before = (await gw.cli('account', 'show', account)).balance;
  // Separate connections, so the kernel spreads them over both workers' listening sockets.
  const agents = Array.from({ length: 24 }, () => new Agent({ keepAlive: true, maxSockets: 1 }));
  t.after(() => agents.forEach((a) => a.destroy()));
  const post = (agent) => new Promise((resolve, reject) => {
    const body = chatBody();
    const req = httpRequest(`${gw.url}/v1/chat/completions`, { method: 'POST', agent, headers: { ...bearer(key), 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(body);
  });
  const replies = await Promise.all(agents.map(post));
  assert.ok(replies.every((r) => r.status === 200), `all answered: ${replies.map((r) => r.status)}`);
  const held = connectionsByPid(workers, Number(new URL(gw.url).port));
  assert.ok(held.every((n) => n > 0), `both workers took connections: ${held}`);
  const cost = replies.reduce((sum, r) => sum + priceNano(r.json.usage.prompt_tokens, r.json.usage.completion_tokens), 0n);
  const after = (await gw.cli('account', 'show', account)).balance;
  assert.equal(dollarsToNano(before) - dollarsToNano(after), cost, 'every request debited exactly once');

  process.kill(workers[0], 'SIGKILL');
  let replaced = [];
  for (let i = 0; i < 100 && replaced.length === 0; i++) {
    await new Promise((r) => setTimeout(r, 100));
    replaced = childrenOf(gw.proc.pid).filter((p) => !workers.includes(p));
  }
  assert.equal(replaced.length, 1, 'the primary started a replacement');
  for (let i = 0; i < 6; i++) assert.equal((await post(new Agent())).status, 200, 'still serving after a worker died');

  const all = childrenOf(gw.proc.pid);
  await gw.stop();
  assert.deepEqual((await gw.exited).code, 0, 'the primary drains and exits cleanly on SIGTERM');
  assert.deepEqual(all.filter((p) => existsSync(`/proc/${p}`) && !readFileSync(`/proc/${p}/stat`, 'utf8').includes(') Z ')), [], 'no worker outlives the primary');
});

test('workers above 1 without PostgreSQL and Redis is a configuration error', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-test-'));
  try {
    const cfg = join(dir, 'config.json');
    writeFileSync(cfg, JSON.stringify({ listen: '127.0.0.1:0', workers: 2, upstreams: { sim: { sim: {} } }, models: TEST_MODELS }));
    const r = spawnSync(process.execPath, [CLI, 'serve', '--config', cfg, '--data-dir', dir], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /\/workers: more than one worker needs database and redis/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

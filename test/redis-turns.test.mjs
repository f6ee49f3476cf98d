// The limiter's Redis connection (src/gate/limits/redis-connect.ts) sends each event-loop turn's commands in
// one socket write, and every command still gets its own reply, in order, scripts included.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { openRedis } from '../dist/gate/limits/redis-connect.js';

const URL = process.env.TOLLGATE_TEST_REDIS ?? 'redis://127.0.0.1:6379';

/** Counts the writes that reach the socket's handle (a corked socket's buffered writes leave as one writev). */
function countWrites(r) {
  const s = r.stream;
  const n = { writes: 0 };
  const w = s._write.bind(s);
  const wv = s._writev.bind(s);
  s._write = (...a) => { n.writes++; return w(...a); };
  s._writev = (...a) => { n.writes++; return wv(...a); };
  return n;
}

async function open(t, options = { enableAutoPipelining: true }) {
  const r = openRedis(URL, { maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: false, ...options });
  t.after(() => r.quit().catch(() => r.disconnect()));
  await new Promise((resolve, reject) => { r.once('ready', resolve); r.once('error', reject); });
  r.defineCommand('tgTestAdd', { numberOfKeys: 1, lua: "return redis.call('INCRBY', KEYS[1], ARGV[1])" });
  return r;
}

test('one turn, fifty commands (plain and scripted): one socket write and no Pipeline object, and every reply is its own, in order', async (t) => {
  const r = await open(t);
  const key = `tgtest:turns:${randomBytes(5).toString('hex')}`;
  await r.ping(); // the script's first use loads it (NOSCRIPT, then EVAL): not counted below
  await r.tgTestAdd(key, '0');
  const n = countWrites(r);
  // ioredis's auto-pipelining builds a Pipeline per turn (client.pipeline()), copying every script's methods onto it
  let pipelines = 0;
  const pipeline = r.pipeline.bind(r);
  r.pipeline = (...a) => { pipelines++; return pipeline(...a); };
  const replies = [];
  for (let i = 1; i <= 25; i++) {
    replies.push(r.incr(key));
    replies.push(r.tgTestAdd(key, '1000'));
  }
  const got = await Promise.all(replies);
  assert.equal(n.writes, 1, 'the turn\'s commands left in one write');
  assert.equal(pipelines, 0, 'no Pipeline was built for the turn');
  await r.del(key);
  assert.deepEqual(got, Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? (i / 2) * 1001 + 1 : ((i + 1) / 2) * 1001)));
});

test('commands of two turns leave in two writes; without batching each command is a write of its own', async (t) => {
  const r = await open(t);
  const n = countWrites(r);
  const first = [r.ping(), r.ping(), r.ping()];
  await new Promise((resolve) => setImmediate(resolve));
  const second = [r.ping(), r.ping()];
  assert.deepEqual(await Promise.all([...first, ...second]), ['PONG', 'PONG', 'PONG', 'PONG', 'PONG']);
  assert.equal(n.writes, 2);

  const plain = await open(t, { enableAutoPipelining: false });
  const m = countWrites(plain);
  await Promise.all([plain.ping(), plain.ping(), plain.ping()]);
  assert.equal(m.writes, 3);
});

test('commands sent after the turn\'s I/O (in setImmediate) leave at once when the sender uncorks, in one write, before the event loop polls again', async (t) => {
  // The limiter's batches (admissions, releases, settles, commits) are sent from setImmediate, after the turn's
  // I/O. A setImmediate made there runs only after the next poll of the event loop, so the settle's durable
  // record waited a whole loop iteration after its reply was read; the limiter now uncorks as its batches end.
  const r = await open(t);
  const key = `tgtest:turns:${randomBytes(5).toString('hex')}`;
  await r.tgTestAdd(key, '0'); // loads the script: not counted below
  const n = countWrites(r);
  const { atOnce, replies } = await new Promise((resolve) => setImmediate(() => {
    const replies = [r.incr(key), r.tgTestAdd(key, '10'), r.ping()];
    r.uncorkNow();
    resolve({ atOnce: n.writes, replies });
  }));
  assert.equal(atOnce, 1, 'the three commands reached the socket in one write before the callback returned');
  assert.deepEqual(await Promise.all(replies), [1, 11, 'PONG']);
  assert.equal(n.writes, 1, 'and nothing was left for the setImmediate the first command scheduled');
  await r.del(key);
});

// kill -9 mid-response on the realtime pass-through: the response under way is billed as an HTTP stream is, its
// prompt and the output at its last running record, once; the completed responses their response.done, once (both stores).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from '../node_modules/ioredis/built/index.js';
import { ledgerOf, redisLen } from './helpers/recovery.mjs';
import { startGateway, freshDatabase, clearRedisPrefix, dollarsToNano, TEST_MODELS, REDIS_URL } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';

const UPSTREAMS = { sim: { sim: {} }, rt: { sim: {}, realtime_api: true } };
/** Priced as OpenAI's gpt-realtime: $4 text in, $0.40 cached, $32 audio in, $16 text out, $64 audio out, per 1M tokens. */
const PASS = { id: 'sim-rt-pass', upstream: 'rt', upstream_model: 'sim-chat', kind: 'realtime', simulated: true,
  input_per_mtok: '4', cached_input_per_mtok: '0.40', audio_input_per_mtok: '32', output_per_mtok: '16', audio_output_per_mtok: '64', max_output_tokens: 4096 };
const CONFIG = { upstreams: UPSTREAMS, models: [...TEST_MODELS, PASS] };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The model's price of disjoint token counts (nanodollars per 1M tokens), rounded up once. */
function price({ text = 0, cached = 0, audioIn = 0, out = 0, audioOut = 0 }) {
  const num = BigInt(text) * 4_000_000_000n + BigInt(cached) * 400_000_000n + BigInt(audioIn) * 32_000_000_000n
    + BigInt(out) * 16_000_000_000n + BigInt(audioOut) * 64_000_000_000n;
  return num === 0n ? 0n : (num + 999_999n) / 1_000_000n;
}
/** A response.done usage block (text only here) at the model's prices. */
const priceReported = (u) => price({ text: u.input_tokens, out: u.output_tokens });
/** A ledger entry's usage column at the model's prices. */
const priceRecorded = (u) => price({ text: u.input_tokens, cached: u.cached_input_tokens ?? 0, audioIn: u.audio_input_tokens ?? 0, out: u.output_tokens, audioOut: u.audio_output_tokens ?? 0 });

const waitFor = async (what, fn, ms = 20_000) => {
  const end = Date.now() + ms;
  while (!(await fn())) { if (Date.now() > end) throw new Error(`timed out waiting for ${what}`); await sleep(25); }
};


const user = (text) => ({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text }] } });

/**
 * A pass-through session S on `gw` with two text responses, then kill -9: the first has completed, the second
 * streams (the upstream: a token every 150 ms) and is killed ~1.3 s after its first delta, past its second
 * running record; a second session Z has had one response and is idle. `lastRecord()` reads the running record
 * the dead process left for S's second response. Returns the completed responses' usage and that record.
 */
async function killDuringResponse(t, gw, key, lastRecord) {
  const url = `${gw.url.replace(/^http/, 'ws')}/alpha/v1/realtime?model=sim-rt-pass`;
  const headers = { authorization: `Bearer ${key}`, 'x-sim-token-delay-ms': '150' };
  const s = await connect(url, { headers });
  const z = await connect(url, { headers });
  assert.ok(s.ws && z.ws, JSON.stringify(s.refused ?? z.refused));
  await s.until((e) => e.type === 'session.created');
  await z.until((e) => e.type === 'session.created');
  s.send(user('A short answer first.'));
  s.send({ type: 'response.create', response: { max_output_tokens: 8 } });
  z.send(user('One answer, then this session stays idle.'));
  z.send({ type: 'response.create', response: { max_output_tokens: 8 } });
  const first = await s.until((e) => e.type === 'response.done');
  assert.equal(first.response.status, 'completed', JSON.stringify(first.response.status_details));
  const idle = await z.until((e) => e.type === 'response.done');
  assert.equal(idle.response.status, 'completed', JSON.stringify(idle.response.status_details));
  s.send(user('Now tell me a long story about gateways.'));
  s.send({ type: 'response.create', response: { max_output_tokens: 400 } });
  const created = await s.until((e) => e.type === 'response.created' && e.response.id !== first.response.id);
  await s.until((e) => e.type === 'response.output_text.delta' && e.response_id === created.response.id);
  await sleep(1300);
  gw.proc.kill('SIGKILL');
  await gw.exited;
  s.ws.terminate();
  z.ws.terminate();
  assert.ok(!s.frames.some((e) => e.type === 'response.done' && e.response.id === created.response.id), 'the kill came mid-response');
  const seen = s.frames.filter((e) => e.type === 'response.output_text.delta' && e.response_id === created.response.id).length;
  const record = await lastRecord();
  t.diagnostic(`first response usage ${JSON.stringify(first.response.usage)}; second: ${seen} deltas seen; its last running record: ${JSON.stringify(record)}`);
  assert.ok(record, 'a running record of the response under way was left by the dead process');
  assert.match(record.idemKey, /^[^#~]+#2$/, 'recorded under the response\'s own ledger key');
  assert.ok(record.usage.output_tokens >= 2, `the record was kept up to date as the response streamed (${record.usage.output_tokens} output tokens)`);
  assert.ok(record.usage.output_tokens <= seen, `no more output recorded than the client was sent (${record.usage.output_tokens} of ${seen})`);
  const firstTurn = first.response.usage.input_tokens + first.response.usage.output_tokens;
  assert.ok(record.usage.input_tokens > firstTurn, `its prompt carries the first turn (${record.usage.input_tokens} > ${firstTurn})`);
  assert.equal(BigInt(record.amount), priceRecorded(record.usage), 'priced at the model\'s token prices');
  return { first: first.response.usage, idle: idle.response.usage, record, sessionId: record.idemKey.slice(0, -2) };
}

test('a realtime pass-through killed with kill -9 mid-response (PostgreSQL + Redis): recovery on another instance bills the response under way its prompt and the output at its last record, once, and the completed ones once', async (t) => {
  const db = await freshDatabase();
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const redis = new Redis(REDIS_URL);
  t.after(async () => { await redis.quit().catch(() => redis.disconnect()); await db.drop(); await clearRedisPrefix(prefix); });
  const a = await startGateway(t, { ...CONFIG, store: 'postgres', redis: true, database: db, redisPrefix: prefix });
  const b = await startGateway(t, { ...CONFIG, store: 'postgres', redis: true, database: db, redisPrefix: prefix });
  const { account, key } = await a.account('1', { rpm: 100000, concurrency: 100 });
  const lastRecord = async () => {
    // `<amount>|<entry>` under the session's hold; the dead instance's heartbeat is only 5 s stale after this.
    const entries = Object.values(await redis.hgetall(`${prefix}{${account}}:run`)).map((v) => JSON.parse(v.slice(v.indexOf('|') + 1)));
    return entries.find((e) => e.idemKey.endsWith('#2')) ?? null;
  };
  const { first, idle, record, sessionId } = await killDuringResponse(t, a, key, lastRecord);
  await waitFor('recovery by the surviving instance', async () => (await redis.hlen(`${prefix}{${account}}:holds`)) === 0
    && (await redisLen(redis, `${prefix}{${account}}:pend`)) === 0, 30_000);
  await b.stop();
  const { debits, balance, total } = await ledgerOf(db.url, account);
  t.diagnostic(`debits: ${debits.map((d) => `${d.idem_key} ${d.amount} ${JSON.stringify(d.usage)}`).join('; ')}`);
  assert.equal(debits.length, 3, 'one debit per response: S#1, S#2 (cut by the kill), Z#1');
  const of = (k) => debits.find((d) => d.idem_key === k);
  const r1 = priceReported(first);
  const z1 = priceReported(idle);
  assert.equal(-BigInt(of(`${sessionId}#1`).amount), r1, 'the completed response billed its response.done once');
  assert.equal(-BigInt(of(`${sessionId}#2`).amount), BigInt(record.amount), 'the response under way billed the usage at its last record');
  assert.equal(of(`${sessionId}#2`).usage.output_tokens, record.usage.output_tokens);
  assert.equal(-BigInt(debits.find((d) => !d.idem_key.startsWith(sessionId)).amount), z1, 'the idle session\'s response billed once, its left-over record not again');
  assert.equal(balance, total, 'the balance equals the sum of the ledger');
  assert.equal(balance, 1_000_000_000n - r1 - z1 - BigInt(record.amount));
});

test('a realtime pass-through on an embedded gateway killed with kill -9 mid-response: after the restart the response under way is billed its usage at its last record, once, and the completed ones once', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-crash-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const a = await startGateway(t, { ...CONFIG, store: 'pglite', dataDir: dir });
  const { account, key } = await a.account('1', { rpm: 100000, concurrency: 100 });
  const journal = join(dir, 'run', 'debits.journal');
  // The journal's last `D <id> <entry>` line for the response under way (its running record).
  const lastRecord = () => {
    const lines = existsSync(journal) ? readFileSync(journal, 'utf8').split('\n').filter((l) => l.startsWith('D ')) : [];
    const entries = lines.map((l) => JSON.parse(l.slice(l.indexOf(' ', 2) + 1))).filter((e) => e.idemKey.endsWith('#2'));
    return entries.at(-1) ?? null;
  };
  const { first, idle, record } = await killDuringResponse(t, a, key, lastRecord);
  const b = await startGateway(t, { ...CONFIG, store: 'pglite', dataDir: dir });
  await sleep(1000);
  const show = await b.cli('account', 'show', account);
  const debited = dollarsToNano('1') - dollarsToNano(show.ledger_total);
  const r1 = priceReported(first);
  const z1 = priceReported(idle);
  t.diagnostic(`debited ${debited} nd; owed ${r1} + ${z1} + ${record.amount} nd`);
  assert.equal(show.balance, show.ledger_total, 'the balance equals the sum of the ledger');
  assert.equal(debited, r1 + z1 + BigInt(record.amount), 'each response billed once: the completed ones their response.done, the one under way its last record');
});

// The session half of the exchange in process (in-process limiter + journal, PGlite): a Part's key and sequence, its hold grown and settled, zero usage, recovery after a crash, refusals.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { openPglite } from '../dist/store/db.js';
import { StateCache } from '../dist/gate/cache.js';
import { MemoryLimiter } from '../dist/gate/limits/memory.js';
import { DebitJournal } from '../dist/ledger/journal.js';
import { Settler } from '../dist/ledger/settle.js';
import { Committer } from '../dist/exchange/committer.js';
import { Recovery } from '../dist/exchange/recovery.js';
import { Metrics } from '../dist/observe/metrics.js';
import { Charge } from '../dist/exchange/charge.js';
import { Part } from '../dist/exchange/part.js';
import { relayPart } from '../dist/exchange/relay-part.js';
import { SessionEnd } from '../dist/exchange/session-end.js';
import { usage } from '../dist/exchange/usage.js';
import { GatewayError } from '../dist/errors.js';
import { alpha } from '../dist/families/alpha/family.js';
import { beta } from '../dist/families/beta/family.js';
import { createAccount } from '../dist/store/accounts.js';
import { createKey } from '../dist/store/keys.js';

const dir = mkdtempSync(join(tmpdir(), 'tollgate-exchange-'));
const journalPath = join(dir, 'run', 'debits.journal');
let db;
/** $15 per million characters: 15,000 nd a character. */
const MODEL = { id: 'test-tts', prices: { inputPerMTok: 0n, outputPerMTok: 0n, perMChar: 15_000_000_000n, audioInPerMinute: 0n, audioOutPerMinute: 0n } };
const PER_CHAR = 15_000n;
const chars = (n, basis = 'exact') => usage({ characters: n, basis });

/** One process's exchange stages over the shared store: cache, in-process limiter with its journal, committer, recovery. */
async function stages() {
  const cache = new StateCache(db);
  await cache.init();
  const limiter = new MemoryLimiter(new DebitJournal(journalPath));
  const settler = new Settler(db, { balance: (id, bal, v) => cache.balance(id, bal, v), spend: (k, p, st, sp, v) => cache.spend(k, p, st, sp, v) });
  const committer = new Committer(settler, limiter, db);
  const admission = { cache, limiter, metrics: new Metrics(), defaultRpm: 1000, defaultConcurrency: 10, holdTtlMs: 60_000, openHolds: { count: 0, releasing: new Set() } };
  return { cache, limiter, settler, committer, admission, recovery: new Recovery(limiter, committer) };
}

let s;
before(async () => {
  db = await openPglite(join(dir, 'data'));
  s = await stages();
});
after(async () => {
  await s.committer.drain(Date.now() + 5000);
  await s.settler.drain();
  await db.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A funded account and a key on it (limits as given); the stages' cache knows the key. */
async function funded(dollars, limits = {}) {
  const acct = await createAccount(db, `${randomBytes(4).toString('hex')}@example.com`);
  const { record } = await createKey(db, { accountId: acct.id, ...limits });
  const amount = BigInt(Math.round(dollars * 1e9));
  if (amount > 0n) await s.settler.submit({ idemKey: `credit:${acct.id}`, nonce: `credit:${acct.id}`, accountId: acct.id, keyId: null, kind: 'credit', amount, reason: 'test' });
  await s.cache.sync();
  return { account: acct.id, key: record };
}

const openSession = (key, id = `sess_${randomBytes(6).toString('hex')}`) =>
  Charge.open(s, { key, id, model: MODEL, reason: 'test.session', worst: usage({ basis: 'exact' }) });

async function debits(account) {
  await s.committer.drain(Date.now() + 5000);
  const r = await db.query(`SELECT idem_key, amount_nd::text AS amount, reason, usage FROM ledger WHERE account_id = $1 AND kind = 'debit' ORDER BY idem_key`, [account]);
  return r.rows.map((x) => {
    // The receipt's fields beside the units: when the exchange began (a time), the prices it was billed at.
    const { started_at: startedAt, ...units } = x.usage;
    assert.match(startedAt, /^\d{4}-\d\d-\d\dT/);
    return { key: x.idem_key, amount: -BigInt(x.amount), reason: x.reason, usage: units };
  });
}

test('parts of a session are numbered 1, 2, … and each is billed under its own ledger key <session>#<seq>', async () => {
  const { account, key } = await funded(1);
  const charge = await openSession(key);
  const a = await Part.begin(charge, { worst: chars(10), known: true, countsAsRequest: true });
  const b = await Part.begin(charge, { worst: chars(20), known: true, reason: 'test.other' });
  assert.deepEqual([a.seq, b.seq], [1, 2]);
  assert.equal(a.key, `${charge.id}#1`);
  assert.equal(charge.held, (10n + 20n) * PER_CHAR, 'both parts held on the session');
  await b.end(chars(20));
  await a.end(chars(10));
  assert.equal(charge.held, 0n);
  assert.equal(charge.billed, 30n * PER_CHAR);
  await charge.release();
  assert.deepEqual(await debits(account), [
    { key: `${charge.id}#1`, amount: 10n * PER_CHAR, reason: 'test.session', usage: { input_tokens: 0, output_tokens: 0, characters: 10, basis: 'exact', prices: { per_mchar: '15' } } },
    { key: `${charge.id}#2`, amount: 20n * PER_CHAR, reason: 'test.other', usage: { input_tokens: 0, output_tokens: 0, characters: 20, basis: 'exact', prices: { per_mchar: '15' } } },
  ]);
  await assert.rejects(() => a.end(chars(1)), /has ended/, 'a part ends once');
});

test('a part holds its worst case, grows its hold, and its end takes all it held off the session (billing what it used)', async () => {
  const { account, key } = await funded(1);
  const charge = await openSession(key);
  const p = await Part.begin(charge, { worst: chars(100) });
  await p.hold(chars(50));
  await p.hold(1_000n);
  assert.equal(p.held, 150n * PER_CHAR + 1_000n);
  assert.equal(charge.held, p.held, 'the session holds what the part holds');
  const { cost } = await p.end(chars(120));
  assert.equal(cost, 120n * PER_CHAR);
  assert.equal(p.billed, cost);
  assert.equal(charge.held, 0n, 'the whole hold came off, not just the cost');
  await charge.release();
  assert.deepEqual((await debits(account)).map((d) => d.amount), [120n * PER_CHAR]);
});

test('a part that used nothing bills nothing and gives its hold back; the session goes on', async () => {
  const { account, key } = await funded(1);
  const charge = await openSession(key);
  const p = await Part.begin(charge, { worst: chars(100) });
  assert.equal(charge.held, 100n * PER_CHAR);
  assert.equal((await p.end(usage({ basis: 'partial' }))).cost, 0n);
  assert.equal(charge.held, 0n);
  assert.ok(charge.isOpen, 'the session stays open');
  const q = await Part.begin(charge, { worst: chars(5) });
  assert.equal(q.seq, 2);
  await q.end(chars(5));
  await charge.release();
  assert.deepEqual((await debits(account)).map((d) => [d.key.split('#')[1], d.amount]), [['2', 5n * PER_CHAR]]);
});

test('refusals come back as the GatewayError a family renders: 402 balance, 402 ceiling, 429 rpm; nothing is held and no number is taken', async () => {
  const poor = await funded(0.001); // 66 characters' worth
  const charge = await openSession(poor.key);
  const err = await Part.begin(charge, { worst: chars(100), known: true }).catch((e) => e);
  assert.ok(err instanceof GatewayError);
  assert.equal(err.status, 402);
  assert.equal(err.code, 'insufficient_balance');
  assert.match(err.message, /needs up to \$0\.0015 \(1500000 nd\); \$0\.001 \(1000000 nd\) is available/);
  // The families render it as they render an HTTP refusal.
  assert.equal(JSON.parse(beta.render(err, 'req_1')).detail.status, 'insufficient_balance');
  assert.deepEqual(Object.keys(JSON.parse(alpha.render(err, 'req_1')).error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(JSON.parse(alpha.render(err, 'req_1')).error.type, 'insufficient_quota');
  assert.equal(charge.held, 0n);
  const ok = await Part.begin(charge, { worst: chars(10), known: true });
  assert.equal(ok.seq, 1, 'the refused part took no number');
  const grow = await ok.hold(chars(100), { known: true }).catch((e) => e);
  assert.equal(grow.code, 'insufficient_balance', 'growing a part is refused the same way');
  assert.equal(ok.held, 10n * PER_CHAR, 'the part keeps what it held');
  await ok.end(chars(10));
  await charge.release();

  const capped = await funded(1, { spendLimit: 150_000n, spendLimitPeriod: 'daily' }); // 10 characters a day
  const c2 = await openSession(capped.key);
  const over = await Part.begin(c2, { worst: chars(11), known: true }).catch((e) => e);
  assert.equal(over.status, 402);
  assert.equal(over.code, 'key_spend_limit_reached');
  await c2.release();

  const slow = await funded(1, { rpmLimit: 2 });
  const c3 = await openSession(slow.key); // the session takes one token
  const p = await Part.begin(c3, { worst: chars(1), countsAsRequest: true }); // the part the other
  const limited = await Part.begin(c3, { worst: chars(1), countsAsRequest: true }).catch((e) => e);
  assert.equal(limited.status, 429);
  assert.equal(limited.code, 'rate_limit_exceeded');
  assert.ok(Number(limited.headers['retry-after']) >= 1);
  await p.end(chars(1));
  await c3.release();
});

test('a running record of a part is recovered after a crash: billed once, under the part\'s key, for what it had produced', async () => {
  const { account, key } = await funded(1);
  const charge = await openSession(key);
  const done = await Part.begin(charge, { worst: chars(30) });
  await done.end(chars(30));
  const p = await Part.begin(charge, { worst: chars(500) });
  assert.equal(p.recordDue(), true);
  await p.record(chars(0, 'partial'));
  assert.equal(p.hasRecord, false, 'nothing produced: nothing recorded');
  await p.record(chars(40, 'partial'));
  assert.equal(p.hasRecord, true);
  assert.equal(p.recordDue(), false, 'throttled: the next one a second later');
  await p.record(chars(90, 'partial'), { wait: true, force: true });
  // The process dies here: the part never ends. Its stages are dropped without a drain; another
  // process over the same store and journal starts and replays what was left.
  await s.committer.drain(Date.now() + 5000);
  const next = await stages();
  await next.recovery.start();
  await next.recovery.stop();
  await next.committer.drain(Date.now() + 5000);
  const rows = await debits(account);
  assert.deepEqual(rows.map((d) => [d.key, d.amount, d.usage.characters, d.usage.basis]), [
    [`${charge.id}#1`, 30n * PER_CHAR, 30, 'exact'],
    [`${charge.id}#2`, 90n * PER_CHAR, 90, 'partial'],
  ], 'the settled part once, the cut part at its last record');
  // A second recovery (the next restart) finds nothing left: nothing is billed twice.
  const again = await stages();
  await again.recovery.start();
  await again.recovery.stop();
  await again.committer.drain(Date.now() + 5000);
  assert.equal((await debits(account)).length, 2);
  s = again;
});

test('a part\'s end after its record bills once: the record and the settle are the same debit', async () => {
  const { account, key } = await funded(1);
  const charge = await openSession(key);
  const p = await Part.begin(charge, { worst: chars(60) });
  await p.record(chars(60, 'partial'));
  await p.end(chars(60));
  await charge.release();
  const rows = await debits(account);
  assert.deepEqual(rows.map((d) => [d.key, d.amount, d.usage.basis]), [[`${charge.id}#1`, 60n * PER_CHAR, 'exact']]);
});

/** An upstream call over a readable the test writes: `push(buf)`, `end()`, `fail()`; `aborted` once abort() was called. */
function fakeCall(status = 200) {
  const res = new PassThrough();
  res.statusCode = status;
  res.headers = {};
  res.complete = false;
  res.setTimeout = () => res;
  const call = { aborted: false, response: Promise.resolve(res), abort: () => { call.aborted = true; res.destroy(); } };
  return { call, push: (b) => res.write(b), end: () => { res.complete = true; res.end(); }, fail: () => res.destroy(new Error('reset')) };
}

/** A meter that bills one character per byte of output so far. */
function byteMeter() {
  let n = 0;
  const m = { mode: 'stream', done: false, produced: false,
    onResponse: () => ({ contentType: 'audio/pcm' }),
    onData: (c) => { n += c.length; m.produced = true; return c; },
    onEnd: (complete) => { if (complete) m.done = true; return complete ? Buffer.from('!') : Buffer.alloc(0); },
    usage: () => chars(n + (m.done ? 1 : 0), m.done ? 'exact' : 'partial') };
  return m;
}

test('relayPart: each piece is recorded before it is sent, the tail after its own record; the caller ends the part', async () => {
  const { account, key } = await funded(1);
  const charge = await openSession(key);
  const p = await Part.begin(charge, { worst: chars(100) });
  const up = fakeCall();
  const sent = [];
  const relaying = relayPart({ part: p, call: up.call, meter: byteMeter(), upstreamError: async () => new Error('no'), idleMs: 1000,
    send: async (out, last) => { sent.push([out.toString(), last, p.hasRecord]); } });
  up.push(Buffer.from('abc'));
  await new Promise((r) => setTimeout(r, 20));
  up.push(Buffer.from('de'));
  up.end();
  const o = await relaying;
  assert.deepEqual(sent, [['abc', false, true], ['de', false, true], ['!', true, true]]);
  assert.deepEqual([o.complete, o.cancelled, o.failure, o.produced, o.usage.characters], [true, false, null, true, 6]);
  await p.end(o.usage);
  await charge.release();
  assert.deepEqual((await debits(account)).map((d) => d.amount), [6n * PER_CHAR]);
});

test('relayPart: cancelled by the session\'s signal, the upstream call is stopped and the part is billed what was produced', async () => {
  const { account, key } = await funded(1);
  const charge = await openSession(key);
  const up = fakeCall();
  const work = { parts: new Set(), stop() {}, idle() { return Promise.all([...this.parts]); } };
  const sock = { closed: false, frames: [], send: async (f) => { sock.frames.push(f); }, close: (code, reason) => { sock.closed = true; sock.code = [code, reason]; } };
  const end = new SessionEnd(sock, work, () => charge);
  const p = await Part.begin(charge, { worst: chars(100) });
  const run = (async () => {
    const o = await relayPart({ part: p, call: up.call, meter: byteMeter(), upstreamError: async () => new Error('no'), idleMs: 1000, signal: end.signal, send: async () => {} });
    await p.end(o.usage);
    return o;
  })();
  work.parts.add(run);
  up.push(Buffer.from('abcd'));
  await new Promise((r) => setTimeout(r, 20));
  await end.end({ code: 1008, reason: 'insufficient_balance', message: '{"error":"insufficient_balance"}', cancel: true });
  const o = await run;
  assert.equal(up.call.aborted, true, 'the upstream call was stopped');
  assert.deepEqual([o.complete, o.cancelled, o.failure, o.usage.characters, o.usage.basis], [false, true, null, 4, 'partial']);
  assert.deepEqual(sock.frames, ['{"error":"insufficient_balance"}'], 'the family\'s message, after the part settled');
  assert.deepEqual(sock.code, [1008, 'insufficient_balance']);
  assert.equal(charge.isOpen, false, 'the slot is freed');
  assert.equal(end.end({ code: 1000 }), end.end({ code: 1011 }), 'an end runs once');
  assert.deepEqual((await debits(account)).map((d) => d.amount), [4n * PER_CHAR]);
});

test('relayPart: an error reply or a reply that breaks off is a failure; nothing produced bills nothing', async () => {
  const { account, key } = await funded(1);
  const charge = await openSession(key);
  const p = await Part.begin(charge, { worst: chars(100) });
  const bad = fakeCall(500);
  const o = await relayPart({ part: p, call: bad.call, meter: byteMeter(), idleMs: 1000, send: async () => {},
    upstreamError: async () => new GatewayError({ status: 502, code: 'upstream_error', message: 'upstream said 500' }) });
  assert.equal(o.failure.code, 'upstream_error');
  assert.equal(o.produced, false);
  assert.equal((await p.end(o.usage)).cost, 0n);
  const q = await Part.begin(charge, { worst: chars(100) });
  const broken = fakeCall();
  const relaying = relayPart({ part: q, call: broken.call, meter: byteMeter(), idleMs: 1000, send: async () => {}, upstreamError: async () => null });
  broken.push(Buffer.from('xyz'));
  await new Promise((r) => setTimeout(r, 20));
  broken.fail();
  const o2 = await relaying;
  assert.equal(o2.failure?.code, 'upstream_error');
  assert.deepEqual([o2.complete, o2.usage.characters, o2.usage.basis], [false, 3, 'partial']);
  await q.end(o2.usage);
  await charge.release();
  assert.deepEqual((await debits(account)).map((d) => [d.key.split('#')[1], d.amount]), [['2', 3n * PER_CHAR]]);
});

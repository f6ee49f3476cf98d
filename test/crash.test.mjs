// kill -9 under load: every request a client was served is billed exactly once, no debit exists without a
// request, and no hold outlives the dead instance — on PostgreSQL + Redis (two instances) and on the embedded store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from '../node_modules/ioredis/built/index.js';
import WebSocket from 'ws';
import { ledgerOf, redisLen } from './helpers/recovery.mjs';
import { startGateway, freshDatabase, clearRedisPrefix, bearer, chatBody, priceNano, dollarsToNano, REDIS_URL } from './helpers/gateway.mjs';

const UPSTREAMS = { sim: { sim: { token_delay_ms: 2 } } };
const BUFFERED = { max_tokens: 16 };
const STREAMED = { stream: true, max_tokens: 200, stream_options: { include_usage: true } };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** At most the first 10 ids, for failure messages. */
const first10 = (ids) => (ids.length > 10 ? `${ids.slice(0, 10).join(', ')}, … (${ids.length} in all)` : ids.join(', '));

/**
 * One chat request with its own x-request-id. Buffered: `complete` once the whole 200 body is read.
 * Streamed: `content` once a data event carried non-empty delta.content, `done` once `data: [DONE]` arrived,
 * `ended` once the body ended cleanly; `complete` = done (the stream reached [DONE]).
 */
async function oneRequest(gw, key, id, kind) {
  const rec = { id, kind, gw: gw.name, status: 0, content: false, done: false, ended: false, complete: false, usage: null, error: null };
  try {
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST', headers: { ...bearer(key), 'x-request-id': id }, body: chatBody(kind === 'stream' ? STREAMED : BUFFERED),
    });
    rec.status = res.status;
    if (kind === 'buffered' || res.status !== 200) {
      const text = await res.text();
      if (res.status === 200) {
        const j = JSON.parse(text);
        rec.usage = j.usage ?? null;
        rec.complete = true;
      }
      return rec;
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    const onEvent = (ev) => {
      for (const line of ev.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trimStart();
        if (data === '[DONE]') { rec.done = true; continue; }
        const j = JSON.parse(data);
        if (j.choices?.some((c) => typeof c.delta?.content === 'string' && c.delta.content.length > 0)) rec.content = true;
        if (j.usage) rec.usage = j.usage;
      }
    };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
      for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
        onEvent(buf.slice(0, i));
        buf = buf.slice(i + 2);
      }
    }
    if (buf.trim()) onEvent(buf);
    rec.ended = true;
  } catch (e) {
    rec.error = String(e?.cause?.code ?? e?.cause?.message ?? e?.message ?? e);
  }
  rec.complete = rec.complete || (rec.kind === 'stream' && rec.status === 200 && rec.done);
  return rec;
}

/**
 * Runs `loops` client loops against one gateway until `until` (or until `stop()` says so after a request),
 * half buffered and half streamed; pushes every request's record to `records`. Returns when all loops end.
 */
async function drive({ gw, key, loops, until, stop = () => false, records, keyOf = () => key, tag }) {
  await Promise.all(Array.from({ length: loops }, async (_, l) => {
    const kind = l % 2 ? 'stream' : 'buffered';
    for (let n = 0; Date.now() < until && !stop(); n++) {
      const id = `crash-${tag}${l}-${n}-${randomBytes(4).toString('hex')}`;
      const rec = await oneRequest(gw, keyOf(l), id, kind);
      rec.loop = l;
      records.push(rec);
    }
  }));
}

function summary(records) {
  const by = {};
  for (const r of records) {
    const k = `${r.gw}/${r.kind}/${r.status}${r.complete ? '/complete' : ''}${r.error ? '/failed' : ''}`;
    by[k] = (by[k] ?? 0) + 1;
  }
  return JSON.stringify(by);
}

test('a gateway killed with kill -9 under load on PostgreSQL + Redis loses no debit: every served request is billed exactly once and no hold is left', async (t) => {
  const db = await freshDatabase();
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const redis = new Redis(REDIS_URL);
  t.after(async () => { await redis.quit().catch(() => redis.disconnect()); await db.drop(); await clearRedisPrefix(prefix); });
  const a = await startGateway(t, { store: 'postgres', redis: true, database: db, redisPrefix: prefix, upstreams: UPSTREAMS });
  const b = await startGateway(t, { store: 'postgres', redis: true, database: db, redisPrefix: prefix, upstreams: UPSTREAMS });
  a.name = 'A';
  b.name = 'B';
  const { account, key } = await a.account('50', { rpm: 100000, concurrency: 1000 });
  // Key naming as in src/gate/limits/redis.ts acctKeys: `${prefix}{${accountId}}:holds`; the pending debits beside it.
  const holdsKey = `${prefix}{${account}}:holds`;
  const pendKey = `${prefix}{${account}}:pend`;
  // Both instances know the key before the load starts (one warm-up request each, recorded like any other).
  const records = [];
  for (const gw of [a, b]) records.push(await oneRequest(gw, key, `crash-warm${gw.name}-${randomBytes(6).toString('hex')}`, 'buffered'));

  const started = Date.now();
  let killedAt = 0;
  const killer = (async () => {
    await sleep(1500);
    killedAt = Date.now();
    a.proc.kill('SIGKILL');
    await a.exited;
  })();
  await Promise.all([
    drive({ gw: a, key, loops: 24, until: started + 3000, stop: () => killedAt > 0, records, tag: 'A' }),
    drive({ gw: b, key, loops: 4, until: started + 3000, records, tag: 'B' }),
    killer,
  ]);
  const loadEnded = Date.now();
  t.diagnostic(`requests: ${records.length} ${summary(records)}; load ran ${loadEnded - started} ms, A killed at +${killedAt - started} ms`);

  // Recovery: the surviving instance commits the dead one's recorded debits and releases its holds.
  let recoveredAt = 0;
  let holds = -1;
  let pend = -1;
  const deadline = Math.max(killedAt + 20_000, loadEnded + 5_000);
  for (;;) {
    holds = await redis.hlen(holdsKey);
    pend = await redisLen(redis, pendKey);
    if (holds === 0 && pend === 0) { recoveredAt = Date.now(); break; }
    if (Date.now() > deadline) break;
    await sleep(100);
  }
  const heldIds = holds > 0 ? (await redis.hkeys(holdsKey)).map((h) => h.split('/')[0]) : [];
  const recoveryMs = recoveredAt ? recoveredAt - killedAt : null;
  t.diagnostic(recoveredAt
    ? `holds and pending debits cleared ${recoveryMs} ms after the kill`
    : `not recovered ${Date.now() - killedAt} ms after the kill: ${holds} holds left (${first10(heldIds)}), ${pend} pending debits`);
  await b.stop();
  t.diagnostic(`instance B stopped: ${JSON.stringify(await b.exited)}`);

  const { debits, balance, total } = await ledgerOf(db.url, account);
  const exact = new Map(); // idem_key → rows stored under exactly that key
  const byBase = new Map(); // id before any `~nonce` → rows
  for (const d of debits) {
    exact.set(d.idem_key, [...(exact.get(d.idem_key) ?? []), d]);
    const base = d.idem_key.split('~')[0];
    byBase.set(base, [...(byBase.get(base) ?? []), d]);
  }
  const sent = new Map(records.map((r) => [r.id, r]));
  const served = records.filter((r) => r.complete);
  const partial = records.filter((r) => r.kind === 'stream' && r.content && !r.complete);
  const doneThenReset = records.filter((r) => r.kind === 'stream' && r.done && !r.ended);
  t.diagnostic(`served (complete 200): ${served.length}; streams cut after content: ${partial.length}; streams that saw [DONE] but not the end: ${doneThenReset.length}; debit rows: ${debits.length}`);

  await t.test('every request that got a complete 200 has exactly one debit stored under its x-request-id', () => {
    const missing = served.filter((r) => !byBase.has(r.id));
    const missingDone = missing.filter((r) => r.kind === 'stream' && !r.ended);
    const notExact = served.filter((r) => byBase.has(r.id) && (exact.get(r.id)?.length ?? 0) !== 1);
    const twice = served.filter((r) => (byBase.get(r.id)?.length ?? 0) > 1);
    const kinds = (rs) => `buffered ${rs.filter((r) => r.kind === 'buffered').length}, streams ${rs.filter((r) => r.kind === 'stream').length}; on A ${rs.filter((r) => r.gw === 'A').length}, on B ${rs.filter((r) => r.gw === 'B').length}`;
    t.diagnostic(`served requests with no debit: ${missing.length}`);
    assert.equal(missing.length, 0, `served requests with no debit: ${missing.length} of ${served.length} (${kinds(missing)}; streams that got [DONE] before the connection was reset: ${missingDone.length}): ${first10(missing.map((r) => r.id))}`);
    assert.equal(twice.length, 0, `served requests with more than one debit: ${twice.length}: ${first10(twice.map((r) => r.id))}`);
    assert.equal(notExact.length, 0, `served requests whose debit is not stored under the id as sent: ${first10(notExact.map((r) => `${r.id} → ${byBase.get(r.id).map((d) => d.idem_key)}`))}`);
  });

  await t.test('each served request is debited the price of the usage it was told', () => {
    const wrong = served.filter((r) => r.usage && byBase.get(r.id)?.length === 1)
      .filter((r) => BigInt(byBase.get(r.id)[0].amount) !== -priceNano(r.usage.prompt_tokens, r.usage.completion_tokens));
    assert.equal(wrong.length, 0, `served requests debited another amount than their usage prices to: ${wrong.length}: ${first10(wrong.map((r) => `${r.id} (${byBase.get(r.id)[0].amount} vs -${priceNano(r.usage.prompt_tokens, r.usage.completion_tokens)})`))}`);
  });

  await t.test('every stream that produced content before the kill has exactly one debit, partial or whole', () => {
    const streamed = records.filter((r) => r.kind === 'stream' && r.content);
    const missing = streamed.filter((r) => !byBase.has(r.id));
    const twice = streamed.filter((r) => byBase.get(r.id)?.length > 1);
    const missingCut = missing.filter((r) => !r.complete);
    t.diagnostic(`streams with content: ${streamed.length} (cut by the kill: ${partial.length}); with no debit: ${missing.length} (cut by the kill: ${missingCut.length})`);
    assert.equal(missing.length, 0, `streams that produced content but have no debit: ${missing.length} of ${streamed.length} (${missingCut.length} of the ${partial.length} cut by the kill): ${first10(missing.map((r) => r.id))}`);
    assert.equal(twice.length, 0, `streams with more than one debit: ${twice.length}: ${first10(twice.map((r) => r.id))}`);
  });

  await t.test('no debit exists without a request, and no request id is debited twice', () => {
    const strangers = debits.filter((d) => !sent.has(d.idem_key.split('~')[0]));
    const dup = [...byBase].filter(([, rows]) => rows.length > 1);
    const unserved = debits.filter((d) => sent.has(d.idem_key.split('~')[0]) && !sent.get(d.idem_key.split('~')[0]).complete);
    t.diagnostic(`debits for requests the client did not see complete (in flight at the kill): ${unserved.length}`);
    assert.equal(strangers.length, 0, `debits whose idem_key is no request id we sent: ${strangers.length}: ${first10(strangers.map((d) => d.idem_key))}`);
    assert.equal(dup.length, 0, `request ids with more than one debit row: ${dup.length}: ${first10(dup.map(([id, rows]) => `${id} (${rows.map((d) => d.idem_key).join(' ')})`))}`);
  });

  await t.test('the balance equals the sum of the ledger', () => {
    assert.equal(balance, total, `balance ${balance} nd vs ledger sum ${total} nd`);
  });

  await t.test('the dead instance\'s holds and pending debits are gone within 15 s of the kill', () => {
    assert.ok(recoveredAt > 0, `after ${Date.now() - killedAt} ms: ${holds} holds left in ${holdsKey} (requests ${first10(heldIds)}), ${pend} entries in ${pendKey}`);
    assert.ok(recoveryMs <= 15_000, `holds and pending debits cleared ${recoveryMs} ms after the kill (limit ~15 s)`);
  });
});

test('a gateway killed with kill -9 on its embedded store loses no debit that it served', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-crash-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const a = await startGateway(t, { store: 'pglite', dataDir: dir, upstreams: UPSTREAMS });
  a.name = 'A';
  const LOOPS = 24;
  // One key per client loop: `account show` reports each key's spend, so a loop's billing is checked on its own.
  const acct = await a.cli('account', 'create', '--email', `u${randomBytes(5).toString('hex')}@example.com`, '--credit', '50');
  const account = acct.account_id;
  const keys = await Promise.all(Array.from({ length: LOOPS }, (_, l) => a.newKey(account, { rpm: 100000, concurrency: 1000, label: `loop${l}` })));
  const records = [];
  const started = Date.now();
  let killedAt = 0;
  const killer = (async () => {
    await sleep(1000);
    killedAt = Date.now();
    a.proc.kill('SIGKILL');
    await a.exited;
  })();
  await Promise.all([
    drive({ gw: a, key: null, keyOf: (l) => keys[l].key, loops: LOOPS, until: started + 2000, stop: () => killedAt > 0, records, tag: 'P' }),
    killer,
  ]);
  t.diagnostic(`requests: ${records.length} ${summary(records)}; A killed at +${killedAt - started} ms`);

  const b = await startGateway(t, { store: 'pglite', dataDir: dir, upstreams: UPSTREAMS });
  t.diagnostic(`a new gateway listens on the same data dir ${Date.now() - killedAt} ms after the kill`);
  await sleep(2000);
  const show = await b.cli('account', 'show', account);
  const metrics = await (await b.fetch('/metrics')).text();
  const openHolds = Number(/^tollgate_open_holds (\d+)/m.exec(metrics)?.[1] ?? NaN);

  const price = (r) => priceNano(r.usage.prompt_tokens, r.usage.completion_tokens);
  const served = records.filter((r) => r.complete);
  const servedNoUsage = served.filter((r) => !r.usage);
  const servedCost = served.filter((r) => r.usage).reduce((s, r) => s + price(r), 0n);
  const debited = dollarsToNano('50') - dollarsToNano(show.ledger_total);
  // The dearest a request here can be: the prompt of a served one plus max_tokens of output.
  const prompt = Math.max(...served.filter((r) => r.usage).map((r) => r.usage.prompt_tokens), 0);
  const dearest = priceNano(prompt, STREAMED.max_tokens);
  const perLoop = Array.from({ length: LOOPS }, (_, l) => {
    const mine = records.filter((r) => r.loop === l);
    const k = show.keys.find((x) => x.prefix === keys[l].prefix);
    const billed = k ? dollarsToNano(k.usage_monthly ?? '0') : 0n;
    const servedNd = mine.filter((r) => r.complete && r.usage).reduce((s, r) => s + price(r), 0n);
    const inFlight = mine.filter((r) => !r.complete && (r.status === 200 || r.error)).length; // could have been billed
    // A loop runs one request at a time, so at most one of its streams was cut by the kill.
    const cut = mine.filter((r) => r.kind === 'stream' && r.content && !r.complete);
    const doneReset = mine.filter((r) => r.complete && r.kind === 'stream' && !r.ended).map((r) => r.id);
    return { loop: l, billed, served: servedNd, inFlight, cut, doneReset, ids: mine.filter((r) => r.complete).map((r) => r.id) };
  });
  // A stream cut after content owes at least its prompt (README: a dropped stream is billed the prompt and the output so far).
  const promptOnly = priceNano(prompt, 0);
  const cutStreams = perLoop.flatMap((p) => p.cut);
  const cutUnbilled = perLoop.filter((p) => p.cut.length > 0 && p.billed < p.served + BigInt(p.cut.length) * promptOnly);
  const short = perLoop.filter((p) => p.billed < p.served);
  // Lower bound on served-but-unbilled requests: a loop's shortfall needs at least shortfall/dearest missing debits.
  const unbilled = short.reduce((n, p) => n + Number((p.served - p.billed + dearest - 1n) / dearest), 0);
  t.diagnostic(`served (complete 200): ${served.length} (without usage: ${servedNoUsage.length}), priced ${servedCost} nd; debited ${debited} nd; open holds on the new instance: ${openHolds}`);
  t.diagnostic(`served-but-unbilled requests: at least ${unbilled} (loops billed less than they were served: ${short.length})`);
  t.diagnostic(`streams cut by the kill after content: ${cutStreams.length}; on loops billed less than served + their prompt: ${cutUnbilled.length}`);

  await t.test('the balance equals the sum of the ledger after the restart', () => {
    assert.equal(show.balance, show.ledger_total, `balance ${show.balance} vs ledger total ${show.ledger_total}`);
  });

  await t.test('the debits cover at least the priced cost of every request served with a complete 200', () => {
    assert.equal(servedNoUsage.length, 0, `served requests without usage in the reply: ${first10(servedNoUsage.map((r) => r.id))}`);
    assert.ok(debited >= servedCost, `debited ${debited} nd < served ${servedCost} nd: short by ${servedCost - debited} nd (at least ${Number((servedCost - debited + dearest - 1n) / dearest)} served requests unbilled)`);
  });

  await t.test('each client loop\'s key is billed at least what that loop was served, and at most one in-flight request more', () => {
    const over = perLoop.filter((p) => p.billed > p.served + BigInt(p.inFlight) * dearest);
    assert.equal(short.length, 0, `served-but-unbilled requests: at least ${unbilled}, on ${short.length} loop keys: ${short.slice(0, 10).map((p) => `loop ${p.loop} billed ${p.billed} nd < served ${p.served} nd (served ids ${first10(p.ids)}${p.doneReset.length ? `; got [DONE] but the connection was reset before the end: ${p.doneReset.join(', ')}` : ''})`).join('; ')}`);
    assert.equal(over.length, 0, `loop keys billed beyond their requests: ${over.slice(0, 10).map((p) => `loop ${p.loop} billed ${p.billed} nd > served ${p.served} nd + ${p.inFlight} in flight`).join('; ')}`);
  });

  await t.test('every stream that produced content before the kill is billed at least its prompt', () => {
    assert.equal(cutUnbilled.length, 0, `streams that produced content but were not billed: ${cutUnbilled.length} of ${cutStreams.length} (their loop key billed no more than its served requests): ${first10(cutUnbilled.flatMap((p) => p.cut.map((r) => r.id)))}`);
  });

  await t.test('no hold is left open on the restarted instance', () => {
    assert.equal(openHolds, 0);
  });
});

/**
 * A stream-input session on gateway `gw`: sends frames on demand, collects server frames. Resolves once open.
 */
function speechSocket(gw, key) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb/stream-input?output_format=pcm_16000&model_id=sim-tts`, { headers: { 'xi-api-key': key } });
    const frames = [];
    ws.on('message', (d) => frames.push(JSON.parse(d.toString())));
    ws.on('error', () => undefined);
    ws.on('open', () => resolve({ ws, frames, send: (m) => ws.send(JSON.stringify(m)) }));
    ws.on('unexpected-response', (_q, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
  });
}

const SPEECH_PER_CHAR = 15_000n; // sim-tts: $15 per million characters
// 150 ms between sim's 250 ms pieces of speech: a generation of 80 characters (4.8 s of speech) takes ~3 s.
const SLOW_SPEECH = { sim: { sim: { token_delay_ms: 150 } } };
const waitFor = async (what, fn, ms = 20_000) => {
  const end = Date.now() + ms;
  while (!(await fn())) { if (Date.now() > end) throw new Error(`timed out waiting for ${what}`); await sleep(25); }
};

/** What the frames' alignments spelled, in order (each audio frame names the characters it speaks). */
const spelled = (frames) => frames.filter((f) => f.audio).map((f) => f.alignment?.chars.join('') ?? '').join('');

/**
 * Two stream-input sessions on `gw`, then kill -9: X has heard one generation and is hearing a second
 * (audio is relayed as the upstream makes it: the kill comes after a few of its frames), Y has heard
 * one generation and is idle (its running record is of a part already settled). Returns what the
 * finished generations owe (nanodollars), the characters of the cut one and what X received of it.
 */
async function killDuringSpeech(t, gw, key) {
  const g1 = 'The first generation is heard whole. ';
  const g2 = 'The second generation is still being spoken by the upstream when the gateway dies. ';
  const y1 = 'Only one generation here. ';
  const x = await speechSocket(gw, key);
  const y = await speechSocket(gw, key);
  x.send({ text: ' ', generation_config: { chunk_length_schedule: [50] } });
  y.send({ text: ' ' });
  x.send({ text: g1, flush: true });
  y.send({ text: y1, flush: true });
  await waitFor('the first generations', () => spelled(x.frames) === g1 && spelled(y.frames) === y1);
  const heardG1 = x.frames.filter((f) => f.audio).length;
  x.send({ text: g2, flush: true });
  // sim: a 250 ms piece every 150 ms; g2 is 83 characters (~5 s of speech, ~3 s to make). Each frame's
  // running record is written before the frame is sent: the kill comes after the third frame arrived.
  await waitFor('three frames of the second generation', () => x.frames.filter((f) => f.audio).length >= heardG1 + 3);
  gw.proc.kill('SIGKILL');
  await gw.exited;
  const frames = x.frames.filter((f) => f.audio).slice(heardG1);
  const received = spelled(x.frames).slice(g1.length);
  const bytes = frames.reduce((n, f) => n + Buffer.from(f.audio, 'base64').length, 0);
  const widest = Math.max(...frames.map((f) => f.alignment?.chars.length ?? 0));
  t.diagnostic(`the client received ${frames.length} frames of the cut generation: ${bytes} bytes, ${received.length} characters (${JSON.stringify(received)})`);
  assert.ok(bytes > 0 && g2.startsWith(received) && received.length > 0 && received.length < [...g2].length, 'killed mid-generation, some of it heard');
  const owed = (text) => BigInt([...text].length) * SPEECH_PER_CHAR;
  return { g1: owed(g1), y1: owed(y1), g2Chars: [...g2].length, received: received.length, widest };
}

/**
 * The cut generation's debit: the characters of its last running record, which was written before the
 * last frame the client received (so at least what it received) and at most one frame more.
 */
function assertCut(cutChars, owed) {
  assert.ok(cutChars >= owed.received && cutChars <= owed.received + owed.widest,
    `the cut generation billed ${cutChars} characters; the client received ${owed.received} (frames of up to ${owed.widest})`);
  assert.ok(cutChars < owed.g2Chars, `not the whole generation (${owed.g2Chars} characters)`);
}

const ascending = (xs) => [...xs].sort((p, q) => (p < q ? -1 : p > q ? 1 : 0));

test('stream-input sessions on a gateway killed with kill -9 mid-generation: the cut generation is billed the characters sent up to its last record, the others theirs, each once', async (t) => {
  const db = await freshDatabase();
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const redis = new Redis(REDIS_URL);
  t.after(async () => { await redis.quit().catch(() => redis.disconnect()); await db.drop(); await clearRedisPrefix(prefix); });
  const a = await startGateway(t, { store: 'postgres', redis: true, database: db, redisPrefix: prefix, upstreams: SLOW_SPEECH });
  const b = await startGateway(t, { store: 'postgres', redis: true, database: db, redisPrefix: prefix, upstreams: SLOW_SPEECH });
  const { account, key } = await a.account('1', { rpm: 100000, concurrency: 100 });
  const owed = await killDuringSpeech(t, a, key);
  const killedAt = Date.now();

  // Instance B takes over: the running record and the settled parts are committed, each once.
  await waitFor('recovery by the surviving instance', async () => (await redis.hlen(`${prefix}{${account}}:holds`)) === 0
    && (await redisLen(redis, `${prefix}{${account}}:pend`)) === 0, 30_000);
  t.diagnostic(`holds and pending debits cleared ${Date.now() - killedAt} ms after the kill`);
  await b.stop();

  const { debits, balance, total } = await ledgerOf(db.url, account);
  t.diagnostic(`debits: ${debits.map((d) => `${d.idem_key} ${d.amount} ${JSON.stringify(d.usage)}`).join('; ')}`);
  assert.equal(debits.length, 3, 'one debit for each generation started: x#1, x#2 (cut by the kill), y#1');
  assert.ok(debits.every((d) => /^sess_[^#~]+#\d$/.test(d.idem_key)), `each under its session and generation, none stored twice: ${debits.map((d) => d.idem_key)}`);
  const cut = debits.find((d) => d.usage.basis === 'partial');
  assert.ok(cut?.idem_key.endsWith('#2'), `the generation cut by the kill: ${JSON.stringify(cut)}`);
  assertCut(cut.usage.characters, owed);
  assert.equal(-BigInt(cut.amount), BigInt(cut.usage.characters) * SPEECH_PER_CHAR, 'billed its characters sent');
  const want = ascending([owed.g1, owed.y1]);
  assert.deepEqual(ascending(debits.filter((d) => d !== cut).map((d) => -BigInt(d.amount))), want, 'the finished ones billed their characters');
  assert.equal(balance, total, 'the balance equals the sum of the ledger');
  assert.equal(balance, 1_000_000_000n - owed.g1 - owed.y1 + BigInt(cut.amount));
});

test('stream-input sessions on an embedded gateway killed with kill -9 mid-generation: after the restart the cut generation is billed the characters sent up to its last record, each once', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-crash-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const a = await startGateway(t, { store: 'pglite', dataDir: dir, upstreams: SLOW_SPEECH });
  const { account, key } = await a.account('1', { rpm: 100000, concurrency: 100 });
  const owed = await killDuringSpeech(t, a, key);
  const b = await startGateway(t, { store: 'pglite', dataDir: dir, upstreams: SLOW_SPEECH });
  await sleep(1000);
  const show = await b.cli('account', 'show', account);
  const debited = dollarsToNano('1') - dollarsToNano(show.ledger_total);
  const cutNano = debited - owed.g1 - owed.y1;
  t.diagnostic(`debited ${debited} nd: ${owed.g1} + ${owed.y1} nd finished, ${cutNano} nd for the cut generation`);
  assert.equal(show.balance, show.ledger_total, 'the balance equals the sum of the ledger');
  assert.equal(cutNano % SPEECH_PER_CHAR, 0n, 'whole characters');
  assertCut(Number(cutNano / SPEECH_PER_CHAR), owed);
});

/** A realtime session on `gw` (raw `ws`): its events, and `until(pred)` for the first that matches. */
function realtimeSocket(gw, key, headers = {}) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${gw.url.replace(/^http/, 'ws')}/alpha/v1/realtime?model=sim-chat`, { headers: { authorization: `Bearer ${key}`, ...headers } });
    const events = [];
    const waiters = [];
    ws.on('message', (d) => { events.push(JSON.parse(d.toString())); for (const w of waiters.splice(0)) w(); });
    ws.on('error', () => undefined);
    const until = async (pred) => { for (;;) { const hit = events.find(pred); if (hit) return hit; await new Promise((r) => waiters.push(r)); } };
    ws.on('open', () => resolve({ ws, events, until, send: (m) => ws.send(JSON.stringify(m)) }));
    ws.on('unexpected-response', (_q, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
  });
}

/**
 * A realtime session on `gw` with two text responses, then kill -9: the first has completed (response.done
 * seen), the second is streaming (sim: a token every 150 ms, at least 16 tokens) and is killed ~1.3 s after
 * its first delta, past its second running record; a second session Z has had one response and is idle.
 * `lastRecord()` reads the running record left by the dead
 * process (its ledger entry) after the kill. Returns the completed responses' usage and that record.
 */
async function killDuringResponse(t, gw, key, lastRecord) {
  const s = await realtimeSocket(gw, key, { 'x-sim-token-delay-ms': '150' });
  const z = await realtimeSocket(gw, key, { 'x-sim-token-delay-ms': '150' });
  await s.until((e) => e.type === 'session.created');
  await z.until((e) => e.type === 'session.created');
  const user = (text) => ({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text }] } });
  s.send(user('A short answer first.'));
  s.send({ type: 'response.create', response: { output_modalities: ['text'] } });
  z.send(user('One answer, then this session stays idle.'));
  z.send({ type: 'response.create', response: { output_modalities: ['text'] } });
  const first = await s.until((e) => e.type === 'response.done');
  assert.equal(first.response.status, 'completed', JSON.stringify(first.response.status_details));
  // Z's one response is done: its running record, left in place, is of a part already settled.
  const idle = await z.until((e) => e.type === 'response.done');
  assert.equal(idle.response.status, 'completed', JSON.stringify(idle.response.status_details));
  s.send(user('Now tell me a long story about gateways.'));
  s.send({ type: 'response.create', response: { output_modalities: ['text'], max_output_tokens: 400 } });
  const created = await s.until((e) => e.type === 'response.created' && e.response.id !== first.response.id);
  await s.until((e) => e.type === 'response.output_text.delta' && e.response_id === created.response.id);
  await sleep(1300);
  gw.proc.kill('SIGKILL');
  await gw.exited;
  s.ws.terminate();
  z.ws.terminate();
  assert.ok(!s.events.some((e) => e.type === 'response.done' && e.response.id === created.response.id), 'the kill came mid-response');
  const seen = s.events.filter((e) => e.type === 'response.output_text.delta' && e.response_id === created.response.id).length;
  const record = await lastRecord();
  t.diagnostic(`first response usage ${JSON.stringify(first.response.usage)}; second: ${seen} deltas seen; its last running record: ${JSON.stringify(record)}`);
  assert.ok(record, 'a running record of the response under way was left by the dead process');
  assert.match(record.idemKey, /^sess_[^#~]+#2$/, 'recorded under the response\'s own ledger key');
  assert.ok(record.usage.output_tokens >= 2, `the record was kept up to date as the response streamed (${record.usage.output_tokens} output tokens)`);
  assert.ok(record.usage.input_tokens > first.response.usage.input_tokens, 'its prompt carries the first turn');
  assert.equal(BigInt(record.amount), priceNano(record.usage.input_tokens, record.usage.output_tokens), 'priced at the model\'s token prices');
  return { first: first.response.usage, idle: idle.response.usage, record, sessionId: record.idemKey.slice(0, -2) };
}

test('realtime sessions on a gateway killed with kill -9 mid-response: recovery on another instance bills the response under way its prompt and the output at its last record, once, and the completed ones once', async (t) => {
  const db = await freshDatabase();
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const redis = new Redis(REDIS_URL);
  t.after(async () => { await redis.quit().catch(() => redis.disconnect()); await db.drop(); await clearRedisPrefix(prefix); });
  const a = await startGateway(t, { store: 'postgres', redis: true, database: db, redisPrefix: prefix });
  const b = await startGateway(t, { store: 'postgres', redis: true, database: db, redisPrefix: prefix });
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
  assert.ok(debits.every((d) => /^sess_[^#~]+#\d$/.test(d.idem_key)), `each under its session and response, none stored twice: ${debits.map((d) => d.idem_key)}`);
  const of = (k) => debits.find((d) => d.idem_key === k);
  const r1 = priceNano(first.input_tokens, first.output_tokens);
  const z1 = priceNano(idle.input_tokens, idle.output_tokens);
  assert.equal(-BigInt(of(`${sessionId}#1`).amount), r1, 'the completed response billed its usage once');
  assert.equal(-BigInt(of(`${sessionId}#2`).amount), BigInt(record.amount), 'the response under way billed the usage at its last record');
  assert.equal(of(`${sessionId}#2`).usage.output_tokens, record.usage.output_tokens);
  assert.equal(-BigInt(debits.find((d) => !d.idem_key.startsWith(sessionId)).amount), z1, 'the idle session\'s response billed once, its left-over record not again');
  assert.equal(balance, total, 'the balance equals the sum of the ledger');
  assert.equal(balance, 1_000_000_000n - r1 - z1 - BigInt(record.amount));
});

test('realtime sessions on an embedded gateway killed with kill -9 mid-response: after the restart the response under way is billed its usage at its last record, once, and the completed ones once', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-crash-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const a = await startGateway(t, { store: 'pglite', dataDir: dir });
  const { account, key } = await a.account('1', { rpm: 100000, concurrency: 100 });
  const journal = join(dir, 'run', 'debits.journal');
  // The journal's last `D <id> <entry>` line for the response under way (its running record).
  const lastRecord = () => {
    const lines = existsSync(journal) ? readFileSync(journal, 'utf8').split('\n').filter((l) => l.startsWith('D ')) : [];
    const entries = lines.map((l) => JSON.parse(l.slice(l.indexOf(' ', 2) + 1))).filter((e) => e.idemKey.endsWith('#2'));
    return entries.at(-1) ?? null;
  };
  const { first, idle, record } = await killDuringResponse(t, a, key, lastRecord);
  const b = await startGateway(t, { store: 'pglite', dataDir: dir });
  await sleep(1000);
  const show = await b.cli('account', 'show', account);
  const debited = dollarsToNano('1') - dollarsToNano(show.ledger_total);
  const r1 = priceNano(first.input_tokens, first.output_tokens);
  const z1 = priceNano(idle.input_tokens, idle.output_tokens);
  t.diagnostic(`debited ${debited} nd; owed ${r1} + ${z1} + ${record.amount} nd`);
  assert.equal(show.balance, show.ledger_total, 'the balance equals the sum of the ledger');
  assert.equal(debited, r1 + z1 + BigInt(record.amount), 'each response billed once: the completed ones their usage, the one under way its last record');
});

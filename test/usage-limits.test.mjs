// Per-key usage limits (tokens, characters, audio seconds per minute): the worst case reserved at admission on both
// limiters and across two instances, what was used settled, and the rate-limit headers of OpenAI and the IETF draft.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { MemoryLimiter } from '../dist/gate/limits/memory.js';
import { RedisLimiter } from '../dist/gate/limits/redis.js';
import { wav as silence } from './helpers/wav.mjs';
import { startGateway, freshDatabase, clearRedisPrefix, bearer, chatBody, assertInvariants, REDIS_URL } from './helpers/gateway.mjs';

const NOW = new Date().toISOString().slice(0, 7) + '-01';
const SLOW_SIM = { sim: { sim: { token_delay_ms: 20 } } };

async function limiters(t) {
  const prefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  const redis = new RedisLimiter(REDIS_URL, prefix);
  await redis.ready();
  t.after(async () => { await redis.close().catch(() => undefined); await clearRedisPrefix(prefix); });
  return [new MemoryLimiter(), redis];
}

const admit = (l, holdId, quotas) => l.admit({
  holdId, accountId: 'acct_q', keyId: 'key_q', rpm: 1_000_000, concurrency: 1_000, money: true, hold: 1n,
  balance: { amount: 1_000_000n, version: 1n }, ceiling: null, spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs: 60_000, quotas,
});
const debit = (id) => ({ id, accountId: 'acct_q', keyId: 'key_q', amount: 1n,
  entry: JSON.stringify({ idemKey: id, nonce: 'n', accountId: 'acct_q', keyId: 'key_q', kind: 'debit', amount: '1', reason: 'test', at: new Date().toISOString() }) });
const tpm = (need) => [{ dim: 't', limit: 60_000, need }];

test('a token limit holds each worst case at admission, gives back the difference at settle and all of it on release (memory and Redis)', async (t) => {
  for (const l of await limiters(t)) {
    // 60,000 tokens a minute: one token a millisecond comes back, so the figures below are checked within a margin.
    const a = await admit(l, 'h1', tpm(40_000));
    assert.equal(a.ok, true, l.kind);
    assert.equal(a.quotas.length, 1);
    assert.ok(a.quotas[0].remaining >= 20_000 && a.quotas[0].remaining < 20_500, `${l.kind}: 20,000 left after the hold (${a.quotas[0].remaining})`);
    const b = await admit(l, 'h2', tpm(40_000));
    assert.equal(b.ok, false, `${l.kind}: a second worst case does not fit while the first is held`);
    assert.equal(b.reason, 'quota_exceeded');
    assert.equal(b.quota.dim, 't');
    assert.ok(b.retryMs > 19_000 && b.retryMs <= 20_000, `${l.kind}: retry when 20,000 more have come back (${b.retryMs} ms)`);
    // h1 used 1,000 of its 40,000: 39,000 come back.
    await l.settle('h1', debit('h1'), true, 1n, tpm(1_000));
    const c = await admit(l, 'h3', tpm(40_000));
    assert.equal(c.ok, true, `${l.kind}: the unused part of the first hold came back`);
    assert.ok(c.quotas[0].remaining >= 19_000 && c.quotas[0].remaining < 19_600, `${l.kind}: 60,000 - 1,000 used - 40,000 held (${c.quotas[0].remaining})`);
    // A released hold (a failed request) gives back all of it.
    await l.release('acct_q', 'h3');
    const d = await admit(l, 'h4', tpm(59_000));
    assert.equal(d.ok, true, `${l.kind}: nothing of the released hold stays taken`);
    // More used than held (an estimate below the truth) leaves the bucket below zero: even a small request waits.
    await l.settle('h4', debit('h4'), true, 1n, tpm(90_000));
    const e = await admit(l, 'h5', tpm(10));
    assert.equal(e.ok, false, `${l.kind}: the overshoot is paid back before the next request`);
    assert.ok(e.retryMs > 25_000, `${l.kind}: about 31 s of refill owed (${e.retryMs} ms)`);
    await l.committed('acct_q', ['h1', 'h4'], { balance: null, spends: [] });
  }
});

function parsePolicy(v) {
  return Object.fromEntries(v.split(/,\s*/).map((item) => {
    const [name, ...params] = item.split(';');
    return [JSON.parse(name), Object.fromEntries(params.map((p) => { const [k, x] = p.split('='); return [k, x.startsWith('"') ? JSON.parse(x) : Number(x)]; }))];
  }));
}

test('a tokens-per-minute key: a 200 carries the requests and tokens headers, a request that does not fit now is a 429 to retry, one above the limit a 429 not to', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: SLOW_SIM });
  const { key, account } = await gw.account('5', { tpm: 2000, rpm: 100 });
  const post = (body) => gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body });
  const body1 = chatBody({ max_tokens: 40, stream: true });
  const worst1 = Buffer.byteLength(body1) + 40;
  const r1 = await post(body1);
  assert.equal(r1.status, 200);
  const h = r1.headers;
  assert.equal(h.get('x-ratelimit-limit-requests'), '100');
  assert.equal(h.get('x-ratelimit-remaining-requests'), '99');
  assert.match(h.get('x-ratelimit-reset-requests'), /^\d+(ms|s)$/);
  assert.equal(h.get('x-ratelimit-limit-tokens'), '2000');
  assert.equal(h.get('x-ratelimit-remaining-tokens'), String(2000 - worst1), 'the worst case (body bytes + max_tokens) is held');
  assert.match(h.get('x-ratelimit-reset-tokens'), /^\d+(ms|s)$/);
  assert.deepEqual(parsePolicy(h.get('ratelimit-policy')), { rpm: { q: 100, w: 60 }, tpm: { q: 2000, qu: 'tokens', w: 60 } });
  const state = parsePolicy(h.get('ratelimit'));
  assert.deepEqual([state.rpm.r, state.tpm.r], [99, 2000 - worst1]);
  assert.ok(state.tpm.t >= 1 && state.tpm.t <= 60);

  // While the stream is held: a request whose worst case is more than what is left.
  const body2 = chatBody({ max_tokens: 2000 - worst1 });
  const r2 = await post(body2);
  assert.equal(r2.status, 429);
  const e2 = (await r2.json()).error;
  assert.equal(e2.code, 'rate_limit_exceeded');
  assert.equal(e2.type, 'tokens');
  assert.match(e2.message, /tokens per min \(TPM\): Limit 2000/);
  const ms = Number(r2.headers.get('retry-after-ms'));
  assert.ok(ms > 0 && ms <= 60_000, `retry-after-ms ${ms}`);
  assert.equal(r2.headers.get('retry-after'), String(Math.ceil(ms / 1000)));
  assert.equal(r2.headers.get('x-ratelimit-limit-tokens'), '2000');
  const left = Number(r2.headers.get('x-ratelimit-remaining-tokens'));
  assert.ok(left >= 2000 - worst1 && left < 2000 - worst1 + 60, `what is left is reported (${left})`);
  assert.match(r2.headers.get('ratelimit'), /"tpm";r=\d+;t=\d+/);
  assert.equal(r2.headers.get('x-should-retry'), null);

  // A worst case above the limit itself can never pass: refused at once, and the clients are told not to retry.
  const r3 = await post(chatBody({ max_tokens: 2001 }));
  assert.equal(r3.status, 429);
  assert.match((await r3.json()).error.message, /^Request too large/);
  assert.equal(r3.headers.get('x-should-retry'), 'false');

  const text = await r1.text();
  assert.match(text, /\[DONE\]/);
  // An error after admission (the upstream failed) carries the headers too, and gives back what it held.
  const failed = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json', 'x-sim-fail-status': '500' }, body: chatBody({ max_tokens: 10 }) });
  assert.equal(failed.status, 502);
  assert.equal(failed.headers.get('x-ratelimit-limit-tokens'), '2000');
  assert.match(failed.headers.get('ratelimit'), /"tpm";r=\d+/);
  // Unmetered routes carry the requests headers too; key inspection shows the limits.
  const models = await gw.fetch('/v1/models', { headers: bearer(key) });
  assert.equal(models.status, 200);
  assert.match(models.headers.get('x-ratelimit-remaining-requests'), /^\d+$/);
  assert.match(models.headers.get('ratelimit-policy'), /^"rpm";q=100;w=60$/);
  const info = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
  assert.deepEqual(info.rate_limit, { rpm: 100, concurrency: 32, tpm: 2000, characters_per_minute: null, audio_seconds_per_minute: null });
  await assertInvariants(assert, gw, account);
});

for (const redis of [false, true]) {
  test(`the beta family carries the requests and characters limits on a 200 and a 429 (text to speech, characters per minute; ${redis ? 'Redis' : 'in-process'} limits)`, async (t) => {
    const gw = await startGateway(t, redis ? { store: 'postgres', redis: true } : { store: 'pglite' });
    const { key, account } = await gw.account('5', { charsPerMin: 100 });
    const tts = (text) => gw.fetch('/beta/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb?output_format=pcm_16000', {
      method: 'POST', headers: { 'xi-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ text }) });
    const r1 = await tts('x'.repeat(60));
    assert.equal(r1.status, 200);
    await r1.arrayBuffer();
    assert.equal(r1.headers.get('x-ratelimit-limit-requests'), '600');
    assert.equal(r1.headers.get('x-ratelimit-limit-tokens'), null, 'no token limit applies to speech');
    assert.deepEqual(parsePolicy(r1.headers.get('ratelimit-policy'))['characters-per-minute'], { q: 100, qu: 'characters', w: 60 });
    assert.equal(parsePolicy(r1.headers.get('ratelimit'))['characters-per-minute'].r, 40);
    // 60 characters were spoken, as held: 40 (and a little refill) are left for the next.
    const r2 = await tts('y'.repeat(60));
    assert.equal(r2.status, 429);
    const body = await r2.json();
    assert.equal(body.detail.status, 'rate_limit_exceeded');
    assert.ok(Number(r2.headers.get('retry-after-ms')) > 0);
    assert.ok(Number(r2.headers.get('retry-after')) >= 1);
    assert.match(r2.headers.get('ratelimit'), /"characters-per-minute";r=4\d;t=\d+/);
    assert.match(r2.headers.get('x-ratelimit-remaining-requests'), /^\d+$/);
    const info = await (await gw.fetch('/svc/v1/key', { headers: { 'xi-api-key': key } })).json();
    assert.equal(info.rate_limit.characters_per_minute, 100);
    await assertInvariants(assert, gw, account);
  });
}

test('a token limit holds across two instances on one Redis and one PostgreSQL: what the admitted requests used stays within the limit and its refill', async (t) => {
  const db = await freshDatabase();
  const redisPrefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  t.after(async () => { await db.drop(); await clearRedisPrefix(redisPrefix); });
  const opts = { database: db, redis: true, redisPrefix, upstreams: { sim: { sim: { token_delay_ms: 5 } } } };
  const gws = [await startGateway(t, opts), await startGateway(t, opts)];
  const LIMIT = 600;
  const { key, account } = await gws[0].account('5', { tpm: LIMIT, rpm: 1000, concurrency: 100 });
  // Twenty requests at once, alternating instances, each using ~45 tokens (a short prompt, the sim's answer under max_tokens 100):
  // together about 900, past the limit if admission counted only what had settled (their worst cases: 20 x ~200).
  const body = chatBody({ max_tokens: 100 });
  const held = Buffer.byteLength(body) + 100;
  const started = Date.now();
  const results = await Promise.all(Array.from({ length: 20 }, async (_, i) => {
    const r = await gws[i % 2].fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body });
    return { status: r.status, headers: r.headers, json: await r.json() };
  }));
  const elapsed = Date.now() - started;
  const ok = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status === 429);
  assert.equal(ok.length + refused.length, 20, `only 200s and 429s: ${results.map((r) => r.status)}`);
  assert.ok(refused.length > 0 && refused.every((r) => r.json.error.type === 'tokens'), 'the token limit refused some');
  assert.ok(ok.length >= 1);
  // The Redis limiter's figures in the headers of a 200 and a 429.
  assert.equal(ok[0].headers.get('x-ratelimit-limit-tokens'), String(LIMIT));
  assert.ok(Number(ok[0].headers.get('x-ratelimit-remaining-tokens')) <= LIMIT - held);
  assert.match(ok[0].headers.get('ratelimit'), /^"rpm";r=\d+;t=\d+, "tpm";r=\d+;t=\d+$/);
  assert.ok(Number(refused[0].headers.get('retry-after-ms')) > 0);
  assert.equal(refused[0].headers.get('x-ratelimit-limit-tokens'), String(LIMIT));
  const used = ok.reduce((n, r) => n + r.json.usage.total_tokens, 0);
  const overshootAllowance = Math.max(0, ...ok.map((r) => r.json.usage.total_tokens - held));
  const refill = Math.ceil(LIMIT * elapsed / 60_000);
  assert.ok(used <= LIMIT + refill + overshootAllowance, `used ${used} tokens <= ${LIMIT} + ${refill} refill + ${overshootAllowance}`);
  await assertInvariants(assert, gws[0], account);
});

test('an audio seconds limit holds a transcription\'s measured seconds: a 200 with what is left, then a 429 to retry', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('1', { audioSecsPerMin: 5 });
  const wav = (ms) => silence(ms / 1000, { amp: 0 });
  const transcribe = () => {
    const f = new FormData();
    f.append('model', 'whisper-1');
    f.append('file', new Blob([wav(3000)], { type: 'audio/wav' }), 'a.wav');
    return gw.fetch('/v1/audio/transcriptions', { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: f });
  };
  const r1 = await transcribe();
  assert.equal(r1.status, 200, await r1.clone().text());
  await r1.text();
  assert.deepEqual(parsePolicy(r1.headers.get('ratelimit-policy'))['audio-seconds-per-minute'], { q: 5, qu: 'audio-seconds', w: 60 });
  assert.equal(parsePolicy(r1.headers.get('ratelimit'))['audio-seconds-per-minute'].r, 2);
  const r2 = await transcribe();
  assert.equal(r2.status, 429);
  const e = (await r2.json()).error;
  assert.equal(e.type, 'audio_seconds');
  assert.match(e.message, /audio seconds per min: Limit 5/);
  const ms = Number(r2.headers.get('retry-after-ms'));
  assert.ok(ms > 10_000 && ms <= 12_000, `one second of audio refills in 12 s (${ms} ms)`);
  await assertInvariants(assert, gw, account);
});

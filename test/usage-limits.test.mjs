// Per-key usage limits (tokens, characters, audio seconds per minute): the worst case reserved at admission on both
// limiters and across two instances, what was used settled, and the rate-limit headers of OpenAI and the IETF draft.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import { MemoryLimiter } from '../dist/gate/limits/memory.js';
import { RedisLimiter } from '../dist/gate/limits/redis.js';
import { startGateway, freshDatabase, clearRedisPrefix, bearer, chatBody, assertInvariants, REDIS_URL } from './helpers/gateway.mjs';
import { ConsoleClient } from './browser/client.mjs';

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
  // Unmetered routes carry the requests headers too; key inspection shows the limits.
  const models = await gw.fetch('/v1/models', { headers: bearer(key) });
  assert.equal(models.status, 200);
  assert.match(models.headers.get('x-ratelimit-remaining-requests'), /^\d+$/);
  assert.match(models.headers.get('ratelimit-policy'), /^"rpm";q=100;w=60$/);
  const info = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
  assert.deepEqual(info.rate_limit, { rpm: 100, concurrency: 32, tpm: 2000, characters_per_minute: null, audio_seconds_per_minute: null });
  await assertInvariants(assert, gw, account);
});

test('the beta family carries the requests and characters limits on a 200 and a 429 (text to speech, characters per minute)', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
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

test('the official OpenAI client waits for retry-after-ms and retries a 429 on its own', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('5', { rpm: 60 });
  // Sixty requests empty the bucket; one comes back each second.
  for (let i = 0; i < 60; i++) assert.equal((await gw.fetch('/v1/models', { headers: bearer(key) })).status, 200);
  const seen = [];
  const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 2,
    fetch: async (url, init) => { const r = await fetch(url, init); seen.push({ status: r.status, at: Date.now(), ms: r.headers.get('retry-after-ms') }); return r; } });
  const started = Date.now();
  const out = await client.chat.completions.create({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
  assert.equal(out.object, 'chat.completion');
  assert.equal(seen[0].status, 429, 'the first attempt was refused');
  assert.ok(Number(seen[0].ms) > 0, 'with retry-after-ms');
  assert.equal(seen.at(-1).status, 200, 'a retry went through');
  const waited = seen[1].at - seen[0].at;
  assert.ok(waited >= Number(seen[0].ms) - 50, `the client waited the retry-after-ms it was given (${waited} ms for ${seen[0].ms} ms)`);
  assert.ok(Date.now() - started < 10_000);
});

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
    return { status: r.status, json: await r.json() };
  }));
  const elapsed = Date.now() - started;
  const ok = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status === 429);
  assert.equal(ok.length + refused.length, 20, `only 200s and 429s: ${results.map((r) => r.status)}`);
  assert.ok(refused.length > 0 && refused.every((r) => r.json.error.type === 'tokens'), 'the token limit refused some');
  assert.ok(ok.length >= 1);
  const used = ok.reduce((n, r) => n + r.json.usage.total_tokens, 0);
  const overshootAllowance = Math.max(0, ...ok.map((r) => r.json.usage.total_tokens - held));
  const refill = Math.ceil(LIMIT * elapsed / 60_000);
  assert.ok(used <= LIMIT + refill + overshootAllowance, `used ${used} tokens <= ${LIMIT} + ${refill} refill + ${overshootAllowance}`);
  await assertInvariants(assert, gws[0], account);
});

test('the CLI sets and clears a key\'s usage limits, and key inspection follows', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, prefix } = await gw.account('1', { tpm: 900 });
  const set = await gw.cli('key', 'limits', prefix, '--chars-per-min', '300', '--audio-secs-per-min', '120', '--tpm', 'none');
  assert.deepEqual([set.tpm_limit, set.chars_per_min_limit, set.audio_secs_per_min_limit], [null, 300, 120]);
  let shown;
  for (let i = 0; i < 50; i++) {
    shown = (await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json()).rate_limit;
    if (shown.characters_per_minute === 300) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.deepEqual(shown, { rpm: 600, concurrency: 32, tpm: null, characters_per_minute: 300, audio_seconds_per_minute: 120 });
  await assert.rejects(gw.cli('key', 'limits', prefix, '--tpm', '0'), /--tpm must be a positive whole number/);
});

test('the console sets a key\'s usage limits on create and edit, shows them, and refuses a bad one saying why', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const c = new ConsoleClient(gw.url);
  await c.signup(`c${randomBytes(5).toString('hex')}@example.com`);
  const { key, prefix } = await c.createKey({ tpm: '5000' });
  const edit = await c.post(`/console/keys/${prefix}`, { label: 'voice', spend_limit: '', period: 'monthly', rpm: '', concurrency: '', tpm: '', chars_per_min: '250', audio_secs_per_min: '90' }, `/console/keys/${prefix}`);
  assert.equal(edit.status, 303);
  const list = await c.request('/console/keys');
  assert.match(list.text, /250 chars\/min · 90 audio s\/min/);
  const form = await c.request(`/console/keys/${prefix}`);
  assert.match(form.text, /id="chars_per_min" name="chars_per_min"[^>]*value="250"/);
  let shown;
  for (let i = 0; i < 50; i++) {
    shown = (await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json()).rate_limit;
    if (shown.characters_per_minute === 250) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.deepEqual([shown.tpm, shown.characters_per_minute, shown.audio_seconds_per_minute], [null, 250, 90]);
  const bad = await c.post(`/console/keys/${prefix}`, { label: 'voice', period: 'monthly', tpm: 'lots' }, `/console/keys/${prefix}`);
  assert.equal(bad.status, 422);
  assert.match(bad.text, /Tokens per minute must be a whole number/);
});

test('a batch line larger than its key\'s token limit fails with the 429 at once; the lines that fit run', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: { TOLLGATE_BATCH_POLL_MS: '50', TOLLGATE_BATCH_LEASE_MS: '1500' }, batches: { concurrency: 1 } });
  const { key, account } = await gw.account('1', { scopes: 'llm,batch', tpm: 1000 });
  const line = (i, maxTokens) => JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions',
    body: { model: 'sim-chat', messages: [{ role: 'user', content: 'hello' }], max_tokens: maxTokens } });
  const form = new FormData();
  form.append('purpose', 'batch');
  form.append('file', new Blob([[line(0, 20), line(1, 1001), line(2, 20)].join('\n') + '\n'], { type: 'application/jsonl' }), 'in.jsonl');
  const file = await (await gw.fetch('/v1/files', { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form })).json();
  const created = await (await gw.fetch('/v1/batches', { method: 'POST', headers: bearer(key),
    body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }) })).json();
  let b;
  for (const until = Date.now() + 60_000; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) {
    b = await (await gw.fetch(`/v1/batches/${created.id}`, { headers: bearer(key) })).json();
    if (['completed', 'failed', 'cancelled', 'expired'].includes(b.status)) break;
  }
  assert.equal(b.status, 'completed', JSON.stringify(b.request_counts));
  assert.deepEqual([b.request_counts.completed, b.request_counts.failed], [2, 1]);
  const errs = (await (await gw.fetch(`/v1/files/${b.error_file_id}/content`, { headers: bearer(key) })).text()).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  assert.equal(errs[0].custom_id, 'req-1');
  assert.equal(errs[0].response.status_code, 429);
  assert.match(errs[0].response.body.error.message, /^Request too large/);
  await assertInvariants(assert, gw, account);
});

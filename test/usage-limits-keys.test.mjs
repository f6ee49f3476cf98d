// Per-key usage limits from the operator's and the user's side: the CLI and the console set them, a batch line
// that can never fit fails, and the official OpenAI client honours the 429's retry-after-ms.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import { startGateway, bearer, assertInvariants } from './helpers/gateway.mjs';
import { ConsoleClient } from './browser/client.mjs';

test('the official OpenAI client waits for retry-after-ms and retries a 429 on its own', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key } = await gw.account('5', { rpm: 60, concurrency: 100 });
  // Sixty requests empty the bucket; one comes back each second.
  const statuses = await Promise.all(Array.from({ length: 60 }, async () => (await gw.fetch('/v1/models', { headers: bearer(key) })).status));
  assert.deepEqual(new Set(statuses), new Set([200]));
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

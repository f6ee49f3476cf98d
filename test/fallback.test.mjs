// Opt-in fallback to another model (issue 27) on completions and responses, and by a key's opt-in: never silent,
// billed at the model that answered, which the reply (JSON, every streamed event, a header) and the receipt name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGateway, bearer, assertInvariants, priceNano, dollarsToNano, CLI, NODE } from './helpers/gateway.mjs';
import { startStub, startRecorder, errorReply, refusedUrl } from './helpers/stub-upstream.mjs';
import OpenAI from 'openai';
import { ConsoleClient } from './browser/client.mjs';

/** cheap-chat's prices: $0.10 in, $0.40 out per 1M tokens (nanodollars per 1M tokens). */
const CHEAP = [100_000_000n, 400_000_000n];
const chat = (id, upstream, extra = {}) => ({ id, upstream, upstream_model: 'sim-chat', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096, ...extra });

/** A gateway whose `big-chat` cannot be reached (connection refused), `busy-chat` answers 503, `broken-chat` 502; `cheap-chat` is sim at other prices, `rec-chat` a recorder. */
async function setUp(t, extra = {}) {
  const down = await refusedUrl();
  const rec = await startRecorder(t);
  const busy = await startStub(t);
  busy.reply = errorReply(503);
  const broken = await startStub(t);
  broken.reply = errorReply(502);
  const gw = await startGateway(t, {
    store: 'postgres', ...extra,
    upstreams: { sim: { sim: {} }, down: { base_url: down }, busy: { base_url: busy.url }, broken: { base_url: broken.url }, rec: { base_url: rec.url } },
    models: [
      chat('sim-chat', 'sim'),
      chat('cheap-chat', 'sim', { input_per_mtok: '0.10', output_per_mtok: '0.40' }),
      chat('small-chat', 'sim', { max_output_tokens: 16 }),
      chat('big-chat', 'down', { input_per_mtok: '30', output_per_mtok: '60', fallbacks: ['cheap-chat'] }),
      chat('busy-chat', 'busy', { fallbacks: ['cheap-chat'] }),
      chat('broken-chat', 'broken', { fallbacks: ['cheap-chat'] }),
      chat('rec-chat', 'rec'),
      { id: 'sim-embed', upstream: 'sim', upstream_model: 'sim-embed', kind: 'embedding', input_per_mtok: '0.02' },
    ],
  });
  return { gw, busy, broken, rec };
}

async function debits(gw, account) {
  const rows = (await gw.cli('account', 'show', account)).balance;
  return rows;
}

/** What the account was billed since `before` (dollars as `account show` gives them), in nanodollars. */
async function spentSince(gw, account, before) {
  return dollarsToNano(String(before)) - dollarsToNano(String(await debits(gw, account)));
}

function post(gw, key, path, body, id) {
  return gw.fetch(path, { method: 'POST', headers: { ...bearer(key), 'x-request-id': id ?? `fb-${randomBytes(6).toString('hex')}` }, body: JSON.stringify(body) });
}

/** The `data:` events of an SSE body, parsed (without [DONE]). */
function events(text) {
  return text.split('\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]').map((l) => JSON.parse(l.slice(6)));
}

async function receipt(gw, key, id) {
  const res = await gw.fetch(`/svc/v1/requests/${id}`, { headers: bearer(key) });
  assert.equal(res.status, 200);
  return (await res.json()).receipt;
}

test('completions fall back to another model only when the request lists it in `models`: billed at the model that answered, which the reply, a header and the receipt name', { timeout: 240_000 }, async (t) => {
  const { gw } = await setUp(t);
  const { key, account } = await gw.account('2');
  const body = { model: 'big-chat', prompt: 'Say hello to the gateway.', max_tokens: 20 };
  let res = await post(gw, key, '/v1/completions', body);
  assert.equal(res.status, 502, 'no silent fallback');
  assert.equal((await res.json()).error.code, 'upstream_unavailable');
  assert.equal(res.headers.get('x-tollgate-fallback'), null);
  assert.equal(await debits(gw, account), 2, 'nothing billed');

  const id = `fb-cmpl-${randomBytes(4).toString('hex')}`;
  res = await post(gw, key, '/v1/completions', { ...body, models: ['cheap-chat'] }, id);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-tollgate-fallback'), 'big-chat', 'the header names the model the request asked for');
  const j = await res.json();
  assert.equal(j.model, 'cheap-chat', 'the reply names the model that answered');
  assert.ok(j.choices[0].text.length > 0);
  const cost = priceNano(j.usage.prompt_tokens, j.usage.completion_tokens, ...CHEAP);
  assert.equal(await spentSince(gw, account, 2), cost, 'billed exactly at cheap-chat\'s prices');
  const r = await receipt(gw, key, id);
  assert.equal(r.model, 'cheap-chat', 'the receipt names the model that answered');
  assert.equal(r.fallback_from, 'big-chat');
  assert.equal(r.cost_nanodollars, cost.toString());

  res = await post(gw, key, '/v1/completions', { ...body, models: ['sim-embed'] });
  assert.equal(res.status, 404, 'a listed model of the wrong kind');
  assert.equal((await res.json()).error.param, 'models');
  res = await post(gw, key, '/v1/completions', { ...body, max_tokens: 100, models: ['small-chat'] });
  assert.equal(res.status, 400, 'each listed model\'s output limit applies');
  assert.equal((await res.json()).error.param, 'max_tokens');
  await assertInvariants(assert, gw, account);
});

test('a streamed completion served by a fallback model names it in every chunk and is billed at its prices', { timeout: 240_000 }, async (t) => {
  const { gw } = await setUp(t);
  const { key, account } = await gw.account('2');
  const res = await post(gw, key, '/v1/completions', { model: 'big-chat', models: ['cheap-chat'], prompt: 'Count to five.', max_tokens: 20, stream: true, stream_options: { include_usage: true } });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-tollgate-fallback'), 'big-chat');
  const ev = events(await res.text());
  assert.ok(ev.length > 2);
  assert.deepEqual([...new Set(ev.map((e) => e.model))], ['cheap-chat'], 'every chunk names the model that answered');
  const usage = ev.at(-1).usage;
  assert.equal(await spentSince(gw, account, 2), priceNano(usage.prompt_tokens, usage.completion_tokens, ...CHEAP));
  await assertInvariants(assert, gw, account);
});

test('responses fall back only when listed: the Response and every streamed event name the model that answered, billed at its prices', { timeout: 240_000 }, async (t) => {
  const { gw } = await setUp(t);
  const { key, account } = await gw.account('2');
  const body = { model: 'big-chat', input: 'Say hello to the gateway.', max_output_tokens: 20 };
  let res = await post(gw, key, '/v1/responses', body);
  assert.equal(res.status, 502, 'no silent fallback');
  assert.equal(await debits(gw, account), 2);

  const id = `fb-resp-${randomBytes(4).toString('hex')}`;
  res = await post(gw, key, '/v1/responses', { ...body, models: ['cheap-chat'] }, id);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-tollgate-fallback'), 'big-chat');
  const j = await res.json();
  assert.equal(j.model, 'cheap-chat');
  assert.ok(j.output_text ?? j.output.length > 0);
  let spent = priceNano(j.usage.input_tokens, j.usage.output_tokens, ...CHEAP);
  assert.equal(await spentSince(gw, account, 2), spent);
  assert.equal((await receipt(gw, key, id)).model, 'cheap-chat');

  res = await post(gw, key, '/v1/responses', { ...body, models: ['cheap-chat'], stream: true });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-tollgate-fallback'), 'big-chat');
  const ev = events(await res.text());
  const named = ev.filter((e) => e.response?.model !== undefined);
  const last = ev.find((e) => e.type === 'response.completed' || e.type === 'response.incomplete');
  assert.ok(named.some((e) => e.type === 'response.created') && last, ev.map((e) => e.type).join(' '));
  assert.deepEqual([...new Set(named.map((e) => e.response.model))], ['cheap-chat'], 'every event that carries the model names the one that answered');
  const u = last.response.usage;
  spent += priceNano(u.input_tokens, u.output_tokens, ...CHEAP);
  assert.equal(await spentSince(gw, account, 2), spent);

  res = await post(gw, key, '/v1/responses', { ...body, models: ['no-such-model'] });
  assert.equal(res.status, 404);
  assert.equal((await res.json()).error.param, 'models');
  res = await post(gw, key, '/v1/responses', { ...body, max_output_tokens: 100, models: ['small-chat'] });
  assert.equal(res.status, 400);
  assert.equal((await res.json()).error.param, 'max_output_tokens');
  await assertInvariants(assert, gw, account);
});

test('`models` is never sent upstream, and a 503 (nothing generated) falls back while a 502 (work may have happened) never does', { timeout: 240_000 }, async (t) => {
  const { gw, busy, broken, rec } = await setUp(t);
  const { key, account } = await gw.account('2');
  const asks = { '/v1/completions': { prompt: 'hi' }, '/v1/responses': { input: 'hi' }, '/v1/chat/completions': { messages: [{ role: 'user', content: 'hi' }] } };
  for (const [path, b] of Object.entries(asks)) {
    const res = await post(gw, key, path, { model: 'rec-chat', models: ['cheap-chat'], ...b });
    assert.equal(res.status, 200, path);
    assert.equal(res.headers.get('x-tollgate-fallback'), null, 'served by the model asked for: no fallback header');
  }
  assert.equal(rec.bodies.length, 3);
  for (const b of rec.bodies) assert.equal('models' in b, false, `\`models\` is not sent upstream: ${JSON.stringify(b)}`);
  // busy-chat answers 503: the listed model serves it.
  let res = await post(gw, key, '/v1/completions', { model: 'busy-chat', models: ['cheap-chat'], prompt: 'hi', max_tokens: 5 });
  assert.equal(res.status, 200);
  assert.equal((await res.json()).model, 'cheap-chat');
  assert.equal(busy.count('POST'), 1);
  // broken-chat answers 502: the work may have happened there, so no other model is tried.
  for (const [path, b] of Object.entries(asks)) {
    res = await post(gw, key, path, { model: 'broken-chat', models: ['cheap-chat'], ...b });
    assert.equal(res.status, 502, `${path}: a 502 never falls back`);
    assert.equal(res.headers.get('x-tollgate-fallback'), null);
  }
  assert.equal(broken.count('POST'), 3);
  await assertInvariants(assert, gw, account);
});

test('a key that opted in (`fallback`) gets the model\'s configured fallbacks; a body `models` list wins; a key that did not opt in gets the plain error', { timeout: 240_000 }, async (t) => {
  const { gw } = await setUp(t);
  const { key: plain, account } = await gw.account('2');
  const opted = await gw.cli('key', 'create', '--account', account, '--fallback', 'true');
  assert.equal(opted.fallback, true);
  const shown = async (k) => (await (await gw.fetch('/svc/v1/key', { headers: bearer(k) })).json()).fallback;
  assert.equal(await shown(opted.key), true, 'GET /svc/v1/key shows the opt-in');
  assert.equal(await shown(plain), false);

  const body = { model: 'big-chat', messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 10 };
  let res = await post(gw, plain, '/v1/chat/completions', body);
  assert.equal(res.status, 502, 'no opt-in: the plain error');
  assert.equal((await res.json()).error.code, 'upstream_unavailable');
  assert.equal(await debits(gw, account), 2);

  const id = `fb-key-${randomBytes(4).toString('hex')}`;
  res = await post(gw, opted.key, '/v1/chat/completions', body, id);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-tollgate-fallback'), 'big-chat');
  const j = await res.json();
  assert.equal(j.model, 'cheap-chat', 'the configured fallback answered');
  assert.equal(await spentSince(gw, account, 2), priceNano(j.usage.prompt_tokens, j.usage.completion_tokens, ...CHEAP));
  assert.equal((await receipt(gw, opted.key, id)).model, 'cheap-chat');
  res = await post(gw, opted.key, '/v1/completions', { model: 'big-chat', prompt: 'hi', max_tokens: 5 });
  assert.equal(res.status, 200);
  assert.equal((await res.json()).model, 'cheap-chat');
  res = await post(gw, opted.key, '/v1/responses', { model: 'big-chat', input: 'hi', max_output_tokens: 5 });
  assert.equal(res.status, 200);
  assert.equal((await res.json()).model, 'cheap-chat');

  res = await post(gw, opted.key, '/v1/chat/completions', { ...body, models: [] });
  assert.equal(res.status, 502, 'the body\'s (empty) list wins over the key\'s opt-in');

  // Opting out again: the key's next requests get the plain error (the key cache takes it within a second).
  const off = await gw.cli('key', 'limits', opted.prefix, '--fallback', 'false');
  assert.equal(off.fallback, false);
  let status = 200;
  for (let i = 0; i < 40 && status === 200; i++) {
    await new Promise((r) => setTimeout(r, 100));
    status = (await post(gw, opted.key, '/v1/chat/completions', body)).status;
  }
  assert.equal(status, 502);
  await assertInvariants(assert, gw, account);
});

test('a batch line with `models` falls back like a live request: its reply names the model that answered, billed at its prices; a line without fails', { timeout: 240_000 }, async (t) => {
  const { gw } = await setUp(t, { env: { TOLLGATE_BATCH_POLL_MS: '50', TOLLGATE_BATCH_LEASE_MS: '1500' } });
  const { key, account } = await gw.account('2');
  const line = (id, extra) => JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/completions', body: { model: 'big-chat', prompt: 'Say hello.', max_tokens: 10, ...extra } });
  const form = new FormData();
  form.append('purpose', 'batch');
  form.append('file', new Blob([`${line('listed', { models: ['cheap-chat'] })}\n${line('plain', {})}\n`], { type: 'application/jsonl' }), 'in.jsonl');
  const file = await (await gw.fetch('/v1/files', { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form })).json();
  let b = await (await gw.fetch('/v1/batches', { method: 'POST', headers: bearer(key), body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/completions', completion_window: '24h' }) })).json();
  for (let i = 0; i < 1200 && !['completed', 'failed', 'cancelled', 'expired'].includes(b.status); i++) {
    await new Promise((r) => setTimeout(r, 100));
    b = await (await gw.fetch(`/v1/batches/${b.id}`, { headers: bearer(key) })).json();
  }
  assert.equal(b.status, 'completed', JSON.stringify(b));
  const lines = async (id) => (await (await gw.fetch(`/v1/files/${id}/content`, { headers: bearer(key) })).text()).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const [out] = await lines(b.output_file_id);
  assert.equal(out.custom_id, 'listed');
  assert.equal(out.response.status_code, 200);
  assert.equal(out.response.body.model, 'cheap-chat', 'the line\'s reply names the model that answered');
  const [err] = await lines(b.error_file_id);
  assert.equal(err.custom_id, 'plain');
  assert.equal(err.response.status_code, 502, 'a line without `models` does not fall back');
  const u = out.response.body.usage;
  assert.equal(await spentSince(gw, account, 2), priceNano(u.prompt_tokens, u.completion_tokens, ...CHEAP), 'billed at cheap-chat\'s (batch) prices');
  await assertInvariants(assert, gw, account);
});

test('the official Node `openai` client sends `models` on completions and responses (as a request option\'s body, or as an extra field) and sees the model that answered', { timeout: 240_000 }, async (t) => {
  const { gw } = await setUp(t);
  const { key, account } = await gw.account('2');
  const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const params = { model: 'big-chat', prompt: 'Say hello.', max_tokens: 10 };
  await assert.rejects(client.completions.create(params), (e) => e instanceof OpenAI.APIError && e.status === 502, 'no models, no fallback');
  // The client's request options take the whole body: `models` goes beside the typed params, no type suppressed.
  const { data, response } = await client.completions.create(params, { body: { ...params, models: ['cheap-chat'] } }).withResponse();
  assert.equal(data.model, 'cheap-chat');
  assert.equal(response.headers.get('x-tollgate-fallback'), 'big-chat');
  const r = await client.responses.create({ model: 'big-chat', input: 'Say hello.', max_output_tokens: 16, models: ['cheap-chat'] });
  assert.equal(r.model, 'cheap-chat');
  assert.ok(r.output_text.length > 0);
  const spent = priceNano(data.usage.prompt_tokens, data.usage.completion_tokens, ...CHEAP) + priceNano(r.usage.input_tokens, r.usage.output_tokens, ...CHEAP);
  assert.equal(await spentSince(gw, account, 2), spent);
  await assertInvariants(assert, gw, account);
});

test('the console opts a key in to model fallback on create and out on edit, shows it, and key inspection follows', { timeout: 240_000 }, async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const c = new ConsoleClient(gw.url);
  await c.signup(`c${randomBytes(5).toString('hex')}@example.com`);
  const { key, prefix } = await c.createKey({ fallback: 'on' });
  const shown = async (want) => {
    let v;
    for (let i = 0; i < 50; i++) {
      v = (await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json()).fallback;
      if (v === want) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    return v;
  };
  assert.equal(await shown(true), true);
  assert.match((await c.request('/console/keys')).text, /model fallback/);
  assert.match((await c.request(`/console/keys/${prefix}`)).text, /name="fallback" checked/);
  // An edit without the box ticked opts the key out.
  const edit = await c.post(`/console/keys/${prefix}`, { label: 'k', spend_limit: '', period: 'monthly', rpm: '', concurrency: '', tpm: '', chars_per_min: '', audio_secs_per_min: '' }, `/console/keys/${prefix}`);
  assert.equal(edit.status, 303);
  assert.equal(await shown(false), false);
  assert.doesNotMatch((await c.request(`/console/keys/${prefix}`)).text, /name="fallback" checked/);
});

test('a model\'s fallbacks are checked when the config loads: known ids, chat models, not itself', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-fb-'));
  try {
    const load = (models) => {
      const path = join(dir, 'config.json');
      writeFileSync(path, JSON.stringify({ upstreams: { sim: { sim: {} } }, payments: { provider: 'sandbox', allow_sandbox: true }, models }));
      return spawnSync(NODE, [CLI, 'key', 'list', '--account', 'nobody@example.com', '--config', path, '--data-dir', dir], { encoding: 'utf8' });
    };
    const embed = { id: 'sim-embed', upstream: 'sim', kind: 'embedding', input_per_mtok: '0.02' };
    let r = load([chat('a', 'sim', { fallbacks: ['nope'] })]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /\/models\/0\/fallbacks\/0: no model named "nope"/);
    r = load([chat('a', 'sim', { fallbacks: ['sim-embed'] }), embed]);
    assert.match(r.stderr, /\/models\/0\/fallbacks\/0: "sim-embed" is a embedding model, not chat/);
    r = load([chat('a', 'sim', { fallbacks: ['a'] })]);
    assert.match(r.stderr, /is this model itself/);
    r = load([chat('a', 'sim'), { ...embed, fallbacks: ['a'] }]);
    assert.match(r.stderr, /\/models\/1\/fallbacks: only a chat model falls back/);
  } finally { rmSync(dir, { recursive: true, force: true }); }
});

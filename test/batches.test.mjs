// Batches and files: upload, create, the worker running every line through the live exchange, billing exact, cancel, expiry, isolation, crashes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { startGateway, freshDatabase, clearRedisPrefix, assertInvariants, priceNano, bearer, TEST_MODELS, balanceNano } from './helpers/gateway.mjs';

const FAST = { TOLLGATE_BATCH_POLL_MS: '50', TOLLGATE_BATCH_LEASE_MS: '1500' };

function jsonl(lines) {
  return lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n';
}

function chatLine(i, extra = {}) {
  return { custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions',
    body: { model: 'sim-chat', messages: [{ role: 'user', content: `Line number ${i} says hello.` }], max_tokens: 20, ...extra } };
}

async function upload(gw, key, text, purpose = 'batch', filename = 'in.jsonl') {
  const form = new FormData();
  form.append('purpose', purpose);
  form.append('file', new Blob([text], { type: 'application/jsonl' }), filename);
  return gw.fetch('/v1/files', { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
}

async function createBatch(gw, key, fileId, extra = {}) {
  return gw.fetch('/v1/batches', { method: 'POST', headers: bearer(key),
    body: JSON.stringify({ input_file_id: fileId, endpoint: '/v1/chat/completions', completion_window: '24h', ...extra }) });
}

async function waitFor(gw, key, id, done = (b) => ['completed', 'failed', 'cancelled', 'expired'].includes(b.status), ms = 120_000) {
  const until = Date.now() + ms;
  for (;;) {
    const b = await (await gw.fetch(`/v1/batches/${id}`, { headers: bearer(key) })).json();
    if (done(b)) return b;
    if (Date.now() > until) throw new Error(`batch ${id} still ${b.status}: ${JSON.stringify(b.request_counts)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function content(gw, key, fileId) {
  const r = await gw.fetch(`/v1/files/${fileId}/content`, { headers: bearer(key) });
  assert.equal(r.status, 200);
  return (await r.text()).split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

/** What the outputs' reported usage costs at the live prices: the balance must move by exactly this. */
function costOf(outputs) {
  let total = 0n;
  for (const o of outputs) total += priceNano(o.response.body.usage.prompt_tokens, o.response.body.usage.completion_tokens);
  return total;
}

for (const store of ['pglite', 'postgres']) {
  test(`a batch runs every line through the exchange and bills exactly what ran (${store})`, async (t) => {
    const gw = await startGateway(t, { store, env: FAST });
    const { account, key } = await gw.account('5', { scopes: 'llm,batch' });
    const before = await gw.cli('account', 'show', account);
    const lines = Array.from({ length: 30 }, (_, i) => chatLine(i));
    // A refused parameter and an unknown model are error lines, not a failed batch.
    lines.push({ ...chatLine(30), body: { ...chatLine(30).body, audio: { voice: 'alloy', format: 'mp3' } } });
    lines.push({ ...chatLine(31), body: { ...chatLine(31).body, model: 'no-such-model' } });
    const up = await upload(gw, key, jsonl(lines));
    assert.equal(up.status, 200);
    const file = await up.json();
    assert.equal(file.object, 'file');
    assert.equal(file.purpose, 'batch');
    const cr = await createBatch(gw, key, file.id, { metadata: { job: 'nightly' } });
    assert.equal(cr.status, 200);
    const created = await cr.json();
    assert.equal(created.status, 'validating');
    assert.deepEqual(created.metadata, { job: 'nightly' });
    const b = await waitFor(gw, key, created.id);
    assert.equal(b.status, 'completed');
    assert.deepEqual(b.request_counts, { total: 32, completed: 30, failed: 2 });
    const out = await content(gw, key, b.output_file_id);
    const errs = await content(gw, key, b.error_file_id);
    assert.equal(out.length, 30);
    assert.deepEqual(out.map((o) => o.custom_id), lines.slice(0, 30).map((l) => l.custom_id));
    for (const o of out) { assert.equal(o.response.status_code, 200); assert.equal(o.response.body.object, 'chat.completion'); assert.equal(o.error, null); }
    assert.deepEqual(errs.map((e) => [e.custom_id, e.response.status_code]).sort(), [['req-30', 400], ['req-31', 404]]);
    assert.equal(errs[0].response.body.error.param !== undefined, true);
    assert.equal(b.usage.input_tokens, out.reduce((a, o) => a + o.response.body.usage.prompt_tokens, 0));
    // Let the debits commit, then: the balance moved by the priced usage of the 30 lines that ran, nothing else.
    await new Promise((r) => setTimeout(r, 500));
    const after = await gw.cli('account', 'show', account);
    const moved = BigInt(Math.round((before.balance - after.balance) * 1e9));
    assert.equal(moved, costOf(out));
    await assertInvariants(assert, gw, account);
  });
}

test('an invalid input file fails the batch with line-numbered errors and bills nothing', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: FAST });
  const { account, key } = await gw.account('5', { scopes: 'llm,batch' });
  const text = jsonl([chatLine(1), 'not json', { ...chatLine(3), url: '/v1/embeddings' }, chatLine(1), { custom_id: 'x', method: 'GET', url: '/v1/chat/completions', body: {} }]);
  const file = await (await upload(gw, key, text)).json();
  const created = await (await createBatch(gw, key, file.id)).json();
  const b = await waitFor(gw, key, created.id);
  assert.equal(b.status, 'failed');
  assert.deepEqual(b.errors.data.map((e) => [e.line, e.code]), [[2, 'invalid_json_line'], [3, 'mismatched_endpoint'], [4, 'duplicate_custom_id'], [5, 'invalid_method']]);
  assert.equal(b.output_file_id, undefined, 'a failed batch has no output file');
  assert.ok(b.failed_at);
  const show = await gw.cli('account', 'show', account);
  assert.equal(show.balance, 5);
  await assertInvariants(assert, gw, account);
});

test('files and batches of one account are 404 to another for every verb', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: FAST });
  const a = await gw.account('5', { scopes: 'llm,batch' });
  const b = await gw.account('5', { scopes: 'llm,batch' });
  const file = await (await upload(gw, a.key, jsonl([chatLine(1)]))).json();
  const batch = await (await createBatch(gw, a.key, file.id)).json();
  const h = bearer(b.key);
  for (const [method, path] of [['GET', `/v1/files/${file.id}`], ['GET', `/v1/files/${file.id}/content`], ['DELETE', `/v1/files/${file.id}`],
    ['GET', `/v1/batches/${batch.id}`], ['POST', `/v1/batches/${batch.id}/cancel`]]) {
    const r = await gw.fetch(path, { method, headers: h });
    assert.equal(r.status, 404, `${method} ${path}`);
    assert.equal((await r.json()).error.code, 'not_found');
  }
  const r = await createBatch(gw, b.key, file.id);
  assert.equal(r.status, 404, 'a batch cannot read another account\'s file');
  const lists = await (await gw.fetch('/v1/batches', { headers: h })).json();
  assert.deepEqual(lists.data, []);
  const files = await (await gw.fetch('/v1/files', { headers: h })).json();
  assert.deepEqual(files.data, []);
  // Files and batches need the batch scope.
  const llmOnly = await gw.newKey(a.account, { scopes: 'llm' });
  for (const [method, path] of [['GET', '/v1/files'], ['GET', `/v1/batches/${batch.id}`], ['POST', '/v1/batches']]) {
    const r = await gw.fetch(path, { method, headers: bearer(llmOnly.key), ...(method === 'POST' ? { body: '{}' } : {}) });
    assert.equal(r.status, 403, `${method} ${path} without the batch scope`);
  }
  await waitFor(gw, a.key, batch.id);
});

test('an upload past the limit is 413 and leaves no file', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: FAST, batches: { max_file_bytes: 100_000 } });
  const { key } = await gw.account('5', { scopes: 'llm,batch' });
  const big = jsonl(Array.from({ length: 2000 }, (_, i) => chatLine(i)));
  assert.ok(big.length > 100_000);
  const r = await upload(gw, key, big);
  assert.equal(r.status, 413);
  const files = await (await gw.fetch('/v1/files', { headers: bearer(key) })).json();
  assert.deepEqual(files.data, []);
  const ok = await upload(gw, key, jsonl([chatLine(1)]));
  assert.equal(ok.status, 200);
});

test('a cancelled batch bills only the lines that ran and gives the rest error lines', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: FAST, upstreams: { sim: { sim: { token_delay_ms: 20 } } }, batches: { concurrency: 2 } });
  const { account, key } = await gw.account('5', { scopes: 'llm,batch' });
  const before = await balanceNano(gw, account);
  const file = await (await upload(gw, key, jsonl(Array.from({ length: 200 }, (_, i) => chatLine(i))))).json();
  const created = await (await createBatch(gw, key, file.id)).json();
  await waitFor(gw, key, created.id, (b) => b.request_counts.completed >= 3);
  const c = await gw.fetch(`/v1/batches/${created.id}/cancel`, { method: 'POST', headers: bearer(key) });
  assert.equal(c.status, 200);
  assert.equal((await c.json()).status, 'cancelling');
  const b = await waitFor(gw, key, created.id);
  assert.equal(b.status, 'cancelled');
  assert.ok(b.request_counts.completed < 200);
  assert.equal(b.request_counts.completed + b.request_counts.failed, 200);
  const out = await content(gw, key, b.output_file_id);
  const errs = await content(gw, key, b.error_file_id);
  assert.equal(out.length, b.request_counts.completed);
  assert.ok(errs.every((e) => e.error.code === 'batch_cancelled' && e.response === null));
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(before - await balanceNano(gw, account), costOf(out));
  const again = await gw.fetch(`/v1/batches/${created.id}/cancel`, { method: 'POST', headers: bearer(key) });
  assert.equal(again.status, 200);
  await assertInvariants(assert, gw, account);
});

test('a batch past its window expires: lines not run get error lines (postgres)', async (t) => {
  const gw = await startGateway(t, { store: 'postgres', env: FAST, batches: { concurrency: 1 }, upstreams: { sim: { sim: { token_delay_ms: 20 } } } });
  const { account, key } = await gw.account('5', { scopes: 'llm,batch' });
  const file = await (await upload(gw, key, jsonl(Array.from({ length: 100 }, (_, i) => chatLine(i))))).json();
  const created = await (await createBatch(gw, key, file.id)).json();
  await waitFor(gw, key, created.id, (b) => b.request_counts.completed >= 2);
  // Time passes: the window closes.
  const c = new pg.Client({ connectionString: gw.db.url });
  await c.connect();
  await c.query("UPDATE batches SET expires_at = now() - interval '1 second' WHERE id = $1", [created.id]);
  await c.end();
  const b = await waitFor(gw, key, created.id);
  assert.equal(b.status, 'expired');
  assert.ok(b.expired_at);
  const errs = await content(gw, key, b.error_file_id);
  assert.ok(errs.length > 0 && errs.every((e) => e.error.code === 'batch_expired'));
  assert.equal(b.request_counts.completed + b.request_counts.failed, 100);
  await assertInvariants(assert, gw, account);
});

test('kill -9 of a worker mid-batch: the other instance finishes it, every line run and billed exactly once (postgres, two instances)', async (t) => {
  const db = await freshDatabase();
  t.after(() => db.drop());
  const redisPrefix = `tgtest:batch${Date.now()}:`;
  t.after(() => clearRedisPrefix(redisPrefix)); // a shared prefix is the test's to clear, as in crash.test.mjs
  const opts = { store: 'postgres', database: db, redis: true, redisPrefix, env: FAST,
    upstreams: { sim: { sim: { token_delay_ms: 5 } } }, batches: { concurrency: 4 } };
  const a = await startGateway(t, opts);
  const b = await startGateway(t, opts);
  const { account, key } = await a.account('5', { scopes: 'llm,batch' });
  const before = await balanceNano(a, account);
  const n = 300;
  const file = await (await upload(a, key, jsonl(Array.from({ length: n }, (_, i) => chatLine(i))))).json();
  const created = await (await createBatch(a, key, file.id)).json();
  await waitFor(b, key, created.id, (x) => x.request_counts.completed >= 40);
  // Killed while it holds a line it is running (its worker's owner names its pid), so the takeover below has
  // something to take: a machine busy enough to leave it between claims at the moment of the kill left none.
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  t.after(() => c.end().catch(() => undefined)); // on a failure before the end below
  let held = 0;
  for (let i = 0; i < 200 && held === 0; i++) {
    held = (await c.query("SELECT count(*)::int AS n FROM batch_lines WHERE batch_id = $1 AND state = 'pending' AND lease_until > now() AND lease_owner LIKE $2",
      [created.id, `%:${a.proc.pid}:%`])).rows[0].n;
    if (held === 0) await new Promise((r) => setTimeout(r, 5));
  }
  assert.ok(held > 0, 'the instance to be killed holds a line it is running');
  a.proc.kill('SIGKILL');
  await a.exited;
  const done = await waitFor(b, key, created.id);
  assert.equal(done.status, 'completed');
  assert.deepEqual(done.request_counts, { total: n, completed: n, failed: 0 });
  const out = await content(b, key, done.output_file_id);
  assert.equal(out.length, n);
  assert.equal(new Set(out.map((o) => o.custom_id)).size, n, 'each line written once');
  // The dead instance's pending debits are taken over within seconds; then each line is in the ledger once.
  let rows;
  for (let i = 0; i < 100; i++) {
    rows = (await c.query("SELECT idem_key FROM ledger WHERE account_id = $1 AND kind = 'debit'", [account])).rows;
    if (rows.length >= n) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  // The dead instance held lines when it died: they were taken over after their leases lapsed and run again.
  const retaken = (await c.query('SELECT count(*)::int AS n FROM batch_lines WHERE batch_id = $1 AND attempts > 1', [created.id])).rows[0].n;
  await c.end();
  assert.ok(retaken > 0, 'some line was taken over from the killed instance');
  assert.equal(rows.length, n, 'one debit per line');
  assert.equal(new Set(rows.map((r) => r.idem_key)).size, n);
  assert.ok(rows.every((r) => /^batch:batch_[A-Za-z0-9]+:req-\d+$/.test(r.idem_key)));
  assert.equal(before - await balanceNano(b, account), costOf(out));
  await assertInvariants(assert, b, account);
});

test('lines that cannot run for balance become insufficient_balance error lines; the batch completes and lines bill at the batch price', async (t) => {
  const models = TEST_MODELS.map((m) => (m.id === 'sim-chat' ? { ...m, batch_discount_percent: 50 } : m));
  const gw = await startGateway(t, { store: 'pglite', env: FAST, models, batches: { concurrency: 1 } });
  // A line's hold is a known cost (max_tokens is set): lines run while the balance covers one (~$0.00004), so a few do.
  const { account, key } = await gw.account('0.0002', { scopes: 'llm,batch' });
  const before = await balanceNano(gw, account);
  const n = 120;
  const file = await (await upload(gw, key, jsonl(Array.from({ length: n }, (_, i) => chatLine(i))))).json();
  const created = await (await createBatch(gw, key, file.id)).json();
  const b = await waitFor(gw, key, created.id);
  assert.equal(b.status, 'completed');
  assert.equal(b.request_counts.completed + b.request_counts.failed, n);
  assert.ok(b.request_counts.completed > 0 && b.request_counts.failed > 0, JSON.stringify(b.request_counts));
  const out = await content(gw, key, b.output_file_id);
  const errs = await content(gw, key, b.error_file_id);
  assert.ok(errs.every((e) => e.response.status_code === 402 && e.response.body.error.code === 'insufficient_balance'));
  await new Promise((r) => setTimeout(r, 500));
  // Half the live price: $0.15 in, $1.25 out per 1M tokens.
  let cost = 0n;
  for (const o of out) cost += priceNano(o.response.body.usage.prompt_tokens, o.response.body.usage.completion_tokens, 150_000_000n, 1_250_000_000n);
  assert.equal(before - await balanceNano(gw, account), cost);
  // Creating a batch now needs a balance left (402 when none is).
  const after = await balanceNano(gw, account);
  if (after <= 0n) assert.equal((await createBatch(gw, key, file.id)).status, 402);
  await assertInvariants(assert, gw, account);
});

test('kill -9 of the embedded gateway mid-batch: the restart finishes it, every line run and billed once', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'tollgate-batch-'));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const opts = { store: 'pglite', dataDir, env: FAST, upstreams: { sim: { sim: { token_delay_ms: 5 } } }, batches: { concurrency: 4 } };
  const first = await startGateway(t, opts);
  const { account, key } = await first.account('5', { scopes: 'llm,batch' });
  const before = await balanceNano(first, account);
  const n = 150;
  const file = await (await upload(first, key, jsonl(Array.from({ length: n }, (_, i) => chatLine(i))))).json();
  const created = await (await createBatch(first, key, file.id)).json();
  await waitFor(first, key, created.id, (x) => x.request_counts.completed >= 20);
  first.proc.kill('SIGKILL');
  await first.exited;
  const second = await startGateway(t, opts);
  const done = await waitFor(second, key, created.id);
  assert.equal(done.status, 'completed');
  assert.deepEqual(done.request_counts, { total: n, completed: n, failed: 0 });
  const out = await content(second, key, done.output_file_id);
  assert.equal(new Set(out.map((o) => o.custom_id)).size, n);
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(before - await balanceNano(second, account), costOf(out), 'each line billed once');
  await assertInvariants(assert, second, account);
});

test('a custom_id past 64 characters or holding a NUL fails the batch with that line\'s error; 64 characters run', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: FAST });
  const { account, key } = await gw.account('5', { scopes: 'llm,batch' });
  const text = jsonl([{ ...chatLine(1), custom_id: 'a'.repeat(65) }, { ...chatLine(2), custom_id: 'b'.repeat(2660) }, { ...chatLine(3), custom_id: 'c\u0000d' }, chatLine(4)]);
  const bad = await waitFor(gw, key, (await (await createBatch(gw, key, (await (await upload(gw, key, text)).json()).id)).json()).id);
  assert.equal(bad.status, 'failed');
  assert.deepEqual(bad.errors.data.map((e) => [e.line, e.code, e.param]), [[1, 'invalid_custom_id', 'custom_id'], [2, 'invalid_custom_id', 'custom_id'], [3, 'invalid_custom_id', 'custom_id']]);
  assert.match(bad.errors.data[1].message, /is 2660 characters; at most 64/);
  assert.equal((await gw.cli('account', 'show', account)).balance, 5, 'nothing billed');
  const ok = await waitFor(gw, key, (await (await createBatch(gw, key, (await (await upload(gw, key, jsonl([{ ...chatLine(1), custom_id: 'é'.repeat(64) }]))).json()).id)).json()).id);
  assert.equal(ok.status, 'completed');
  assert.equal(ok.request_counts.completed, 1);
  await assertInvariants(assert, gw, account);
});

test('metadata past OpenAI\'s bounds (16 pairs, 64-character keys, 512-character string values) is 400 naming it on batches, chat and responses', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: FAST });
  const { account, key } = await gw.account('5', { scopes: 'llm,batch' });
  const file = await (await upload(gw, key, jsonl([chatLine(1)]))).json();
  const pairs = (n, k = 64, v = 512) => Object.fromEntries(Array.from({ length: n }, (_, i) => [String(i).padEnd(k, 'k'), 'v'.repeat(v)]));
  const bad = [pairs(17, 8, 8), pairs(1, 65, 8), pairs(1, 8, 513), { a: 1 }, ['x'], 'text', { ['k'.repeat(240_000)]: 'v' }];
  const routes = [
    (m) => createBatch(gw, key, file.id, { metadata: m }),
    (m) => gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], metadata: m }) }),
    (m) => gw.fetch('/v1/responses', { method: 'POST', headers: bearer(key), body: JSON.stringify({ model: 'sim-chat', input: 'hi', metadata: m }) }),
  ];
  for (const [i, send] of routes.entries()) {
    for (const m of bad) {
      const r = await send(m);
      assert.equal(r.status, 400, `route ${i}: ${JSON.stringify(m).slice(0, 60)}`);
      const { error } = await r.json();
      assert.equal(error.code, 'invalid_value');
      assert.equal(error.param, 'metadata');
      assert.match(error.message, /at most 16 pairs, keys of at most 64 characters and string values of at most 512/);
    }
    const r = await send(pairs(16));
    assert.equal(r.status, 200, `route ${i}: 16 pairs at the bounds pass`);
    await r.json();
  }
  // Other fields kept and returned as given are bounded too.
  const r = await createBatch(gw, key, file.id, { note: 'n'.repeat(5000) });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.param, 'note');
  const list = await (await gw.fetch('/v1/batches?limit=100', { headers: bearer(key) })).json();
  assert.equal(list.data.length, 1, 'only the batch within the bounds was created');
  assert.equal(Object.keys(list.data[0].metadata).length, 16);
  await waitFor(gw, key, list.data[0].id);
  await assertInvariants(assert, gw, account);
});

test('a file of exactly max_file_bytes is accepted; one byte more is 413 and leaves no row at all, not even uploading (postgres)', async (t) => {
  const gw = await startGateway(t, { env: FAST, batches: { max_file_bytes: 4096 } });
  const { key } = await gw.account('5', { scopes: 'llm,batch' });
  const line = JSON.stringify(chatLine(1));
  const exact = line + '\n' + ' '.repeat(4096 - line.length - 2) + '\n';
  assert.equal(Buffer.byteLength(exact), 4096);
  const ok = await upload(gw, key, exact);
  assert.equal(ok.status, 200);
  assert.equal((await ok.json()).bytes, 4096);
  const c = new pg.Client({ connectionString: gw.db.url });
  c.on('error', () => undefined);
  await c.connect();
  const r = await upload(gw, key, exact + ' ');
  assert.equal(r.status, 413);
  assert.equal((await r.json()).error.code, 'request_too_large');
  const rows = await c.query('SELECT status, count(*)::int AS n FROM files GROUP BY status ORDER BY status');
  assert.deepEqual(rows.rows, [{ status: 'processed', n: 1 }], 'the 413 upload left no row');
  // A file name past 255 bytes is refused, and leaves nothing either.
  const long = await upload(gw, key, exact, 'batch', `${'n'.repeat(300)}.jsonl`);
  assert.equal(long.status, 400);
  assert.equal((await long.json()).error.param, 'file');
  assert.equal((await c.query('SELECT count(*)::int AS n FROM files')).rows[0].n, 1);
  await c.end();
});

test('a batch line of max_body_bytes runs; one byte more is line_too_large', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: FAST, limits: { max_body_bytes: 2048 } });
  const { account, key } = await gw.account('5', { scopes: 'llm,batch' });
  const sized = (i, bytes) => {
    const base = JSON.stringify(chatLine(i, { user: '' }));
    return JSON.stringify(chatLine(i, { user: 'u'.repeat(bytes - base.length) }));
  };
  assert.equal(sized(1, 2048).length, 2048);
  const ok = await waitFor(gw, key, (await (await createBatch(gw, key, (await (await upload(gw, key, jsonl([sized(1, 2048)]))).json()).id)).json()).id);
  assert.equal(ok.status, 'completed');
  const bad = await waitFor(gw, key, (await (await createBatch(gw, key, (await (await upload(gw, key, jsonl([sized(1, 2048), sized(2, 2049)]))).json()).id)).json()).id);
  assert.equal(bad.status, 'failed');
  assert.deepEqual(bad.errors.data.map((e) => [e.line, e.code]), [[2, 'line_too_large']]);
  await assertInvariants(assert, gw, account);
});

test('batch and file lists are written a page at a time and read whole: 45 batches at the metadata bounds, has_more and after across pages', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: FAST, batches: { concurrency: 0 } });
  const { key } = await gw.account('5', { scopes: 'llm,batch' });
  const file = await (await upload(gw, key, jsonl([chatLine(1)]))).json();
  const metadata = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [String(i).padEnd(64, 'k'), 'v'.repeat(512)]));
  const ids = [];
  for (let i = 0; i < 45; i++) ids.push((await (await createBatch(gw, key, file.id, { metadata })).json()).id);
  const all = await (await gw.fetch('/v1/batches?limit=100', { headers: bearer(key) })).json();
  assert.deepEqual(all.data.map((b) => b.id), [...ids].reverse());
  assert.equal(all.has_more, false);
  assert.equal(all.first_id, ids.at(-1));
  assert.equal(all.last_id, ids[0]);
  assert.deepEqual(all.data[44].metadata, metadata);
  const head = await (await gw.fetch('/v1/batches?limit=30', { headers: bearer(key) })).json();
  assert.equal(head.data.length, 30);
  assert.equal(head.has_more, true);
  const rest = await (await gw.fetch(`/v1/batches?limit=30&after=${head.last_id}`, { headers: bearer(key) })).json();
  assert.deepEqual([...head.data, ...rest.data].map((b) => b.id), all.data.map((b) => b.id));
  assert.equal(rest.has_more, false);
  const none = await (await gw.fetch(`/v1/batches?after=${ids[0]}`, { headers: bearer(key) })).json();
  assert.deepEqual(none, { object: 'list', data: [], has_more: false });
  const files = await (await gw.fetch('/v1/files', { headers: bearer(key) })).json();
  assert.deepEqual(files, { object: 'list', data: [files.data[0]], first_id: file.id, last_id: file.id, has_more: false });
});

test('a batch asked by an alias names its model by the Tollgate id, as its lines do; a cancelled batch\'s error lines are written as every other line (one JSON formatting)', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: FAST, upstreams: { sim: { sim: { token_delay_ms: 20 } } }, batches: { concurrency: 2 } });
  const { account, key } = await gw.account('5', { scopes: 'llm,batch' });
  const lines = Array.from({ length: 120 }, (_, i) => chatLine(i, { model: 'tollgate-27b' }));
  // One line that cannot run: a request error line, written by the worker.
  lines.push({ ...chatLine(999), body: { ...chatLine(999).body, model: 'tollgate-27b', audio: { voice: 'alloy', format: 'mp3' } } });
  const file = await (await upload(gw, key, jsonl(lines))).json();
  const created = await (await createBatch(gw, key, file.id)).json();
  const running = await waitFor(gw, key, created.id, (b) => b.request_counts.completed >= 3);
  assert.equal(running.model, 'sim-chat');
  assert.equal((await (await gw.fetch('/v1/batches', { headers: bearer(key) })).json()).data[0].model, 'sim-chat');
  await gw.fetch(`/v1/batches/${created.id}/cancel`, { method: 'POST', headers: bearer(key) });
  const b = await waitFor(gw, key, created.id);
  assert.equal(b.status, 'cancelled');
  assert.equal(b.model, 'sim-chat');
  const out = await content(gw, key, b.output_file_id);
  assert.ok(out.length > 0 && out.every((o) => o.response.body.model === 'sim-chat'));
  const raw = (await (await gw.fetch(`/v1/files/${b.error_file_id}/content`, { headers: bearer(key) })).text()).split('\n').filter(Boolean);
  const cancelled = raw.filter((l) => JSON.parse(l).error?.code === 'batch_cancelled');
  assert.ok(cancelled.length > 0);
  for (const l of raw) assert.equal(l, JSON.stringify(JSON.parse(l)));
  assert.deepEqual(Object.keys(JSON.parse(cancelled[0])), ['id', 'custom_id', 'response', 'error']);
  await assertInvariants(assert, gw, account);
});

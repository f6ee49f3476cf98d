// The official `openai` npm client with files and batches: upload JSONL, create, poll to completion, page
// through batches, cancel, download the output and error files, 404 across accounts, billing exact.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { startGateway, costNano } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

const line = (i, extra = {}) => ({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions',
  body: { model: 'sim-chat', messages: [{ role: 'user', content: `Batch line ${i}.` }], max_tokens: 16, ...extra } });
const jsonl = (lines) => Buffer.from(lines.map((l) => JSON.stringify(l)).join('\n') + '\n');

async function fresh() {
  const acct = await gw.account('5');
  return { ...acct, client: gw.client(acct.key, '/v1') };
}

async function upload(client, lines, name = 'in.jsonl') {
  return client.files.create({ file: await toFile(jsonl(lines), name), purpose: 'batch' });
}

async function wait(client, id, until = (b) => ['completed', 'failed', 'cancelled', 'expired'].includes(b.status)) {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const b = await client.batches.retrieve(id);
    if (until(b)) return b;
    assert.ok(Date.now() < deadline, `batch ${id} still ${b.status}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function lines(client, fileId) {
  return (await (await client.files.content(fileId)).text()).split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

test('a batch uploaded as JSONL completes; its output and error files download; the balance moves by exactly the lines that ran', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const input = [...Array.from({ length: 10 }, (_, i) => line(i)), line(10, { logit_bias: { 50256: -100 }, audio: { voice: 'alloy', format: 'mp3' } })];
  const file = await upload(client, input);
  assert.equal(file.purpose, 'batch');
  const created = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  assert.equal(created.status, 'validating');
  const b = await wait(client, created.id);
  assert.equal(b.status, 'completed');
  assert.deepEqual(b.request_counts, { total: 11, completed: 10, failed: 1 });
  const out = await lines(client, b.output_file_id);
  const errs = await lines(client, b.error_file_id);
  assert.deepEqual(out.map((o) => o.custom_id), input.slice(0, 10).map((l) => l.custom_id));
  assert.equal(errs.length, 1);
  assert.equal(errs[0].custom_id, 'req-10');
  assert.equal(errs[0].response.status_code, 400);
  let cost = 0n;
  for (const o of out) cost += costNano('sim-chat', o.response.body.usage.prompt_tokens, o.response.body.usage.completion_tokens);
  const afterBal = await gw.settledBalance(key, before);
  assert.equal(before - afterBal, cost);
});

test('batches page newest first through the client, and a cancelled batch ends cancelled', async () => {
  const { client } = await fresh();
  const file = await upload(client, Array.from({ length: 300 }, (_, i) => line(i)));
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push((await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' })).id);
  const first = await client.batches.list({ limit: 2 });
  assert.deepEqual(first.data.map((b) => b.id), ids.slice().reverse().slice(0, 2));
  assert.equal(first.has_more, true);
  const all = [];
  for await (const b of client.batches.list({ limit: 2 })) all.push(b.id);
  assert.deepEqual(all, ids.slice().reverse());
  for (const id of ids) {
    const c = await client.batches.cancel(id);
    assert.ok(['cancelling', 'cancelled'].includes(c.status));
  }
  for (const id of ids) assert.equal((await wait(client, id)).status, 'cancelled');
});

test("another account's files and batches are 404 for every verb", async () => {
  const { client } = await fresh();
  const other = (await fresh()).client;
  const file = await upload(client, [line(0)]);
  const b = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  for (const call of [() => other.files.retrieve(file.id), () => other.files.content(file.id), () => other.files.del?.(file.id) ?? other.files.delete(file.id),
    () => other.batches.retrieve(b.id), () => other.batches.cancel(b.id),
    () => other.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' })]) {
    await assert.rejects(call, (e) => e instanceof OpenAI.NotFoundError);
  }
  await wait(client, b.id);
  const deleted = await (client.files.del ? client.files.del(file.id) : client.files.delete(file.id));
  assert.equal(deleted.deleted, true);
});

// Replies name the model the client asked for (an alias: its model's id), never the upstream's name, through the
// official `openai` npm client: chat, streamed chat, completions, embeddings and responses.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, costNano, HELLO, RENAMED_MODELS } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway({ models: RENAMED_MODELS }); });
after(async () => { await gw?.stop(); });

for (const asked of ['gemma-3-27b-it', 'gemma-27b']) {
  test(`a chat completion for ${asked} and every chunk of its stream name gemma-3-27b-it, and it is billed`, async () => {
    const { key } = await gw.account('5');
    const client = gw.client(key);
    const before = await gw.balance(key);
    const completion = await client.chat.completions.create({ model: asked, messages: HELLO });
    assert.equal(completion.model, 'gemma-3-27b-it');
    const u = completion.usage;
    assert.equal(before - await gw.settledBalance(key, before), costNano('gemma-3-27b-it', u.prompt_tokens, u.completion_tokens));
    const chunks = [];
    for await (const c of await client.chat.completions.create({ model: asked, messages: HELLO, stream: true, stream_options: { include_usage: true } })) chunks.push(c);
    assert.ok(chunks.length > 3 && chunks.at(-1).usage);
    assert.deepEqual([...new Set(chunks.map((c) => c.model))], ['gemma-3-27b-it']);
  });
}

test('completions, embeddings and responses name the model asked for', async () => {
  const { key } = await gw.account('5');
  const client = gw.client(key);
  assert.equal((await client.completions.create({ model: 'gemma-27b', prompt: 'Once', max_tokens: 4 })).model, 'gemma-3-27b-it');
  assert.equal((await client.embeddings.create({ model: 'bge-m3', input: ['one', 'two'] })).model, 'bge-m3');
  assert.equal((await client.responses.create({ model: 'gemma-27b', input: 'Hi' })).model, 'gemma-3-27b-it');
});

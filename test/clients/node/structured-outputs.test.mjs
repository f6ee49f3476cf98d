// Structured Outputs through the official `openai` npm client against the embedded default: `parse()` with a JSON
// schema (chat and responses) gets the parsed object back, json_object gets a JSON object, each billed exactly.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, costNano } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

const EVENT = {
  type: 'object', additionalProperties: false, required: ['title', 'when', 'kind', 'participants', 'note'],
  properties: {
    title: { type: 'string' },
    when: { type: 'string', format: 'date-time' },
    kind: { type: 'string', enum: ['meeting', 'call'] },
    participants: { type: 'array', items: { $ref: '#/$defs/Person' } },
    note: { anyOf: [{ type: 'string' }, { type: 'null' }] },
  },
  $defs: { Person: { type: 'object', additionalProperties: false, required: ['name', 'age'],
    properties: { name: { type: 'string' }, age: { type: 'integer', minimum: 18, maximum: 99 } } } },
};
const PLAN = 'Alice and Bob meet on Friday. Extract the event.';

function assertEvent(e) {
  assert.deepEqual(Object.keys(e).sort(), ['kind', 'note', 'participants', 'title', 'when']);
  assert.ok(['meeting', 'call'].includes(e.kind));
  assert.ok(!Number.isNaN(Date.parse(e.when)));
  assert.ok(e.participants.length > 0);
  for (const p of e.participants) assert.ok(typeof p.name === 'string' && Number.isInteger(p.age) && p.age >= 18 && p.age <= 99);
}

test('chat.completions.parse with a json_schema response_format returns the parsed object and bills it', async () => {
  const { key } = await gw.account('5');
  const client = gw.client(key);
  const before = await gw.balance(key);
  const completion = await client.chat.completions.parse({
    model: 'sim-chat', messages: [{ role: 'user', content: PLAN }],
    response_format: { type: 'json_schema', json_schema: { name: 'event', strict: true, schema: EVENT } },
  });
  assert.equal(completion.choices[0].finish_reason, 'stop');
  assertEvent(completion.choices[0].message.parsed);
  const u = completion.usage;
  assert.equal(before - await gw.settledBalance(key, before), costNano('sim-chat', u.prompt_tokens, u.completion_tokens));
});

test('responses.parse with a json_schema text format returns the parsed object and bills it', async () => {
  const { key } = await gw.account('5');
  const client = gw.client(key);
  const before = await gw.balance(key);
  const response = await client.responses.parse({
    model: 'sim-chat', input: PLAN, text: { format: { type: 'json_schema', name: 'event', strict: true, schema: EVENT } },
  });
  assert.equal(response.status, 'completed');
  assertEvent(response.output_parsed);
  const u = response.usage;
  assert.equal(before - await gw.settledBalance(key, before), costNano('sim-chat', u.input_tokens, u.output_tokens));
});

test('json_object mode answers with a JSON object', async () => {
  const { key } = await gw.account('5');
  const completion = await gw.client(key).chat.completions.create({
    model: 'sim-chat', messages: [{ role: 'user', content: 'Answer in JSON.' }], response_format: { type: 'json_object' } });
  const v = JSON.parse(completion.choices[0].message.content);
  assert.ok(v && typeof v === 'object' && !Array.isArray(v));
});

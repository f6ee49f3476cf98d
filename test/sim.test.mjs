// The simulated upstream (`sim`): OpenAI wire shapes, deterministic generation, usage accounting and injected faults.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startSim, countTokens, DEFAULT_SIM_MODELS } from '../dist/sim/index.js';

async function sim(t, opts) {
  const s = await startSim(opts);
  t.after(() => s.close());
  return s;
}

function post(s, path, body, headers = {}, signal) {
  return fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), signal });
}

async function json(s, path, body, headers) {
  const res = await post(s, path, body, headers);
  assert.equal(res.status, 200, `${path} answered ${res.status}`);
  return res.json();
}

/** The payloads of an SSE body, in order (the last is "[DONE]" when the stream ended properly). */
function events(text) {
  assert.ok(text.endsWith('\n\n'), 'every event ends with a blank line');
  return text.split('\n\n').filter(Boolean).map((e) => {
    assert.ok(e.startsWith('data: '), `event ${JSON.stringify(e.slice(0, 40))} is a data line`);
    return e.slice(6);
  });
}

async function stream(s, path, body, headers) {
  const res = await post(s, path, { ...body, stream: true }, headers);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const ev = events(await res.text());
  assert.equal(ev.at(-1), '[DONE]');
  return ev.slice(0, -1).map((e) => JSON.parse(e));
}

/** Reads a body until the server cuts it off; returns what arrived and whether it ended in an error. */
async function readUntilCut(res) {
  const reader = res.body.getReader();
  let text = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { text, cut: false };
      text += Buffer.from(value).toString();
    }
  } catch {
    return { text, cut: true };
  }
}

const user = (content) => ({ model: 'sim-chat', messages: [{ role: 'user', content }] });
const contentDeltas = (chunks) => chunks.flatMap((c) => c.choices).filter((ch) => typeof ch.delta?.content === 'string' && ch.delta.content !== '');

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' }, days: { type: 'integer' }, units: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        alerts: { type: 'boolean' }, tags: { type: 'array', items: { type: 'string' } },
        where: { type: 'object', properties: { lat: { type: 'number' } }, required: ['lat'] },
      },
      required: ['city', 'units', 'where', 'extra'],
    },
  },
};
const CLOCK = { type: 'function', function: { name: 'read_clock', parameters: { type: 'object', properties: { zone: { type: 'string' } } } } };

test('countTokens counts exactly the matches of /\\w+|[^\\w\\s]/gu, on plain and awkward text', () => {
  assert.equal(countTokens('Hello there, friend!'), 5);
  assert.equal(countTokens(''), 0);
  assert.equal(countTokens('  \n\t '), 0);
  assert.equal(countTokens('snake_case42 ok'), 2);
  const alphabet = ['a', 'Z', '9', '_', ' ', '\n', '\t', '.', ',', '"', '{', 'é', 'ß', '日', '😀', '\u00a0', '\u2003', '\u3000', '\ufeff', '\ud800', '\udc00', '-', '\u200b'];
  let x = 12345;
  const rnd = () => { x = (Math.imul(x, 1103515245) + 12345) >>> 0; return x / 2 ** 32; };
  for (let n = 0; n < 2000; n++) {
    let s = '';
    const len = (rnd() * 30) | 0;
    for (let i = 0; i < len; i++) s += alphabet[(rnd() * alphabet.length) | 0];
    assert.equal(countTokens(s), (s.match(/\w+|[^\w\s]/gu) ?? []).length, JSON.stringify(s));
  }
});

test('the same chat request gets the same answer, and a different seed gets a different one', async (t) => {
  const s = await sim(t);
  const body = { ...user('Tell me about rivers.'), seed: 7 };
  const a = await json(s, '/v1/chat/completions', body);
  const b = await json(s, '/v1/chat/completions', body);
  const c = await json(s, '/v1/chat/completions', { ...body, seed: 8 });
  const d = await json(s, '/v1/chat/completions', { ...body, messages: [{ role: 'user', content: 'Tell me about stones.' }] });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.deepEqual(a.usage, b.usage);
  assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
  assert.notEqual(a.choices[0].message.content, d.choices[0].message.content);
  assert.notEqual(a.id, b.id, 'ids are unique per response');
  assert.match(a.id, /^chatcmpl-[0-9a-f]+$/);
});

test('a chat completion has the OpenAI shape, with prompt tokens counted per message and completion tokens per content token', async (t) => {
  const s = await sim(t);
  const messages = [
    { role: 'system', content: 'You are terse.' }, // 4 tokens
    { role: 'user', content: [{ type: 'text', text: 'Hello there, friend!' }, { type: 'image_url', image_url: { url: 'x' } }] }, // 5
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"oslo"}' } }] }, // 1 + 9
    { role: 'tool', tool_call_id: 'call_1', content: 'sunny' }, // 1
  ];
  const r = await json(s, '/v1/chat/completions', { model: 'sim-chat', messages, temperature: 0.2, top_p: 0.9 });
  assert.deepEqual(Object.keys(r).sort(), ['choices', 'created', 'id', 'model', 'object', 'usage']);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, 'sim-chat');
  assert.ok(Number.isInteger(r.created) && Math.abs(r.created - Date.now() / 1000) < 60);
  assert.equal(r.choices.length, 1);
  const [ch] = r.choices;
  assert.equal(ch.index, 0);
  assert.equal(ch.logprobs, null);
  assert.equal(ch.finish_reason, 'stop');
  assert.deepEqual(Object.keys(ch.message).sort(), ['content', 'refusal', 'role']);
  assert.equal(ch.message.role, 'assistant');
  assert.equal(ch.message.refusal, null);
  assert.equal(r.usage.prompt_tokens, 3 + (3 + 4) + (3 + 5) + (3 + 10) + (3 + 1));
  const n = countTokens(ch.message.content);
  assert.ok(n >= 16 && n <= 64, `natural length ${n} is 16..64`);
  assert.equal(r.usage.completion_tokens, n);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + n);
});

test('a stream sends one delta per token, and its include_usage chunk matches the whole answer', async (t) => {
  const s = await sim(t);
  const body = { ...user('Stream me something.'), seed: 1 };
  const whole = await json(s, '/v1/chat/completions', body);
  const chunks = await stream(s, '/v1/chat/completions', { ...body, stream_options: { include_usage: true } });
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, chunks[0].id);
    assert.equal(c.model, 'sim-chat');
  }
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  const deltas = contentDeltas(chunks);
  assert.equal(deltas.map((d) => d.delta.content).join(''), whole.choices[0].message.content);
  assert.equal(deltas.length, whole.usage.completion_tokens);
  for (const d of deltas) assert.equal(countTokens(d.delta.content), 1);
  const finish = chunks.at(-2);
  assert.deepEqual(finish.choices, [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, whole.usage);
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null, 'every other chunk says usage: null');
});

test('a stream without include_usage carries no usage at all', async (t) => {
  const s = await sim(t);
  const chunks = await stream(s, '/v1/chat/completions', user('Quiet, please.'));
  for (const c of chunks) assert.ok(!('usage' in c));
  assert.ok(chunks.at(-1).choices[0].finish_reason);
});

test('continuous_usage_stats puts a running usage on every chunk, ending at the total', async (t) => {
  const s = await sim(t);
  const body = { ...user('Count as you go.'), stream_options: { include_usage: true, continuous_usage_stats: true } };
  const chunks = await stream(s, '/v1/chat/completions', body);
  const total = chunks.at(-1).usage;
  let prev = -1;
  for (const c of chunks.slice(0, -1)) {
    const u = c.usage;
    assert.equal(u.prompt_tokens, total.prompt_tokens);
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
    const isToken = c.choices[0].delta.content;
    assert.equal(u.completion_tokens, isToken ? prev + 1 : Math.max(prev, 0), 'grows by one per token chunk');
    prev = u.completion_tokens;
  }
  assert.equal(prev, total.completion_tokens);
  const alone = await stream(s, '/v1/chat/completions', { ...body, stream_options: { continuous_usage_stats: true } });
  assert.ok(alone.every((c) => c.choices.length === 1 && c.usage), 'without include_usage: running usage, no usage-only chunk');
  assert.equal(alone.at(-1).usage.completion_tokens, total.completion_tokens);
});

test('max_tokens and max_completion_tokens cap the answer and finish with length', async (t) => {
  const s = await sim(t);
  for (const cap of [{ max_tokens: 5 }, { max_completion_tokens: 5 }, { max_tokens: 99, max_completion_tokens: 5 }]) {
    const r = await json(s, '/v1/chat/completions', { ...user('Go on.'), ...cap });
    assert.equal(r.usage.completion_tokens, 5, JSON.stringify(cap));
    assert.equal(countTokens(r.choices[0].message.content), 5);
    assert.equal(r.choices[0].finish_reason, 'length');
  }
  const chunks = await stream(s, '/v1/chat/completions', { ...user('Go on.'), max_tokens: 3 });
  assert.equal(contentDeltas(chunks).length, 3);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
  const roomy = await json(s, '/v1/chat/completions', { ...user('Go on.'), max_tokens: 64 });
  assert.equal(roomy.choices[0].finish_reason, 'stop', 'a cap at or above the natural length is not hit');
});

test('a stop string cuts the answer just before it and finishes with stop', async (t) => {
  const s = await sim(t);
  const base = { ...user('Say a long thing.'), seed: 3 };
  const full = (await json(s, '/v1/chat/completions', base)).choices[0].message.content;
  const words = full.match(/\w+/g);
  const stop = words[6].slice(1); // part of a word: the cut can fall inside a token
  const at = full.indexOf(stop);
  for (const variant of [stop, ['never-there', stop]]) {
    const r = await json(s, '/v1/chat/completions', { ...base, stop: variant });
    assert.equal(r.choices[0].message.content, full.slice(0, at));
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.usage.completion_tokens, countTokens(full.slice(0, at)));
  }
  const chunks = await stream(s, '/v1/chat/completions', { ...base, stop: ` ${words[6]}`, stream_options: { include_usage: true } });
  const deltas = contentDeltas(chunks);
  assert.equal(deltas.map((d) => d.delta.content).join(''), full.slice(0, full.indexOf(` ${words[6]}`)));
  assert.equal(deltas.length, chunks.at(-1).usage.completion_tokens);
  const wordAt = full.indexOf(words[6]);
  assert.equal(full[wordAt - 1], ' ', 'precondition: this stop string starts right after a space');
  const spaced = await json(s, '/v1/chat/completions', { ...base, stop: words[6] });
  assert.equal(spaced.choices[0].message.content, full.slice(0, wordAt), 'the space before the stop string stays');
  assert.equal(spaced.usage.completion_tokens, countTokens(full.slice(0, wordAt)));
  const spacedChunks = await stream(s, '/v1/chat/completions', { ...base, stop: words[6] });
  assert.deepEqual(contentDeltas(spacedChunks).map((d) => countTokens(d.delta.content)), Array(countTokens(full.slice(0, wordAt))).fill(1), 'still one token per delta');
  const none = await json(s, '/v1/chat/completions', { ...base, stop: 'zzz' });
  assert.equal(none.choices[0].message.content, full);
});

test('n=2 gives two choices seeded by their index, and usage adds them up', async (t) => {
  const s = await sim(t);
  const one = await json(s, '/v1/chat/completions', { ...user('Two ways.'), seed: 11 });
  const two = await json(s, '/v1/chat/completions', { ...user('Two ways.'), seed: 11, n: 2 });
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  assert.equal(two.choices[0].message.content, one.choices[0].message.content);
  assert.notEqual(two.choices[1].message.content, two.choices[0].message.content);
  const sum = two.choices.reduce((a, c) => a + countTokens(c.message.content), 0);
  assert.equal(two.usage.completion_tokens, sum);
  const chunks = await stream(s, '/v1/chat/completions', { ...user('Two ways.'), seed: 11, n: 2, stream_options: { include_usage: true } });
  for (const i of [0, 1]) {
    const mine = chunks.filter((c) => c.choices[0]?.index === i);
    assert.deepEqual(mine[0].choices[0].delta, { role: 'assistant', content: '' });
    assert.equal(contentDeltas(mine).map((d) => d.delta.content).join(''), two.choices[i].message.content);
    assert.equal(mine.at(-1).choices[0].finish_reason, two.choices[i].finish_reason);
  }
  assert.equal(chunks.at(-1).usage.completion_tokens, two.usage.completion_tokens);
});

test('a tool call has null content, a call_ id and JSON arguments that satisfy the schema and its required fields', async (t) => {
  const s = await sim(t);
  const r = await json(s, '/v1/chat/completions', { ...user('Weather in Oslo?'), tools: [WEATHER, CLOCK] });
  const [ch] = r.choices;
  assert.equal(ch.finish_reason, 'tool_calls');
  assert.equal(ch.message.content, null);
  assert.equal(ch.message.tool_calls.length, 1);
  const [call] = ch.message.tool_calls;
  assert.match(call.id, /^call_[0-9a-f]+$/);
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather', 'auto calls the first tool');
  const args = JSON.parse(call.function.arguments);
  for (const k of WEATHER.function.parameters.required) assert.ok(k in args, `required ${k} is present`);
  assert.equal(typeof args.city, 'string');
  assert.ok(Number.isInteger(args.days));
  assert.equal(args.units, 'celsius');
  assert.equal(args.alerts, true);
  assert.equal(args.tags.length, 1);
  assert.equal(typeof args.where.lat, 'number');
  assert.equal(r.usage.completion_tokens, countTokens(call.function.arguments) + countTokens('get_weather'));
  const again = await json(s, '/v1/chat/completions', { ...user('Weather in Oslo?'), tools: [WEATHER, CLOCK] });
  assert.deepEqual(again.choices[0].message.tool_calls, ch.message.tool_calls, 'deterministic, id included');
  const named = await json(s, '/v1/chat/completions', { ...user('Time?'), tools: [WEATHER, CLOCK], tool_choice: { type: 'function', function: { name: 'read_clock' } } });
  assert.equal(named.choices[0].message.tool_calls[0].function.name, 'read_clock');
  const required = await json(s, '/v1/chat/completions', { ...user('Time?'), tools: [CLOCK, WEATHER], tool_choice: 'required' });
  assert.equal(required.choices[0].message.tool_calls[0].function.name, 'read_clock');
  const none = await json(s, '/v1/chat/completions', { ...user('Time?'), tools: [WEATHER], tool_choice: 'none' });
  assert.equal(typeof none.choices[0].message.content, 'string');
  assert.ok(!('tool_calls' in none.choices[0].message));
  assert.equal(none.choices[0].finish_reason, 'stop');
});

test('a streamed tool call arrives in OpenAI\'s shape and reassembles to the same arguments', async (t) => {
  const s = await sim(t);
  const body = { ...user('Weather in Oslo?'), tools: [WEATHER] };
  const whole = (await json(s, '/v1/chat/completions', body)).choices[0].message.tool_calls[0];
  const chunks = await stream(s, '/v1/chat/completions', { ...body, stream_options: { include_usage: true } });
  const calls = chunks.flatMap((c) => c.choices).filter((ch) => ch.delta?.tool_calls).map((ch) => ch.delta.tool_calls[0]);
  assert.deepEqual(calls[0], { index: 0, id: whole.id, type: 'function', function: { name: 'get_weather', arguments: '' } });
  const fragments = calls.slice(1);
  for (const f of fragments) assert.deepEqual(Object.keys(f).sort(), ['function', 'index']);
  assert.equal(fragments.map((f) => f.function.arguments).join(''), whole.function.arguments);
  for (const f of fragments) assert.equal(countTokens(f.function.arguments), 1, 'one token per fragment');
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'tool_calls');
  assert.equal(chunks.at(-1).usage.completion_tokens, fragments.length + countTokens('get_weather'));
});

/** A schema of the kind Structured Outputs sends (pydantic's, via the SDKs): $defs and $ref, enums, formats, bounds, nullables. */
const EVENT_SCHEMA = {
  type: 'object', additionalProperties: false, required: ['title', 'when', 'kind', 'attendees', 'rooms', 'priority', 'note'],
  properties: {
    title: { type: 'string', minLength: 12 },
    when: { type: 'string', format: 'date-time' },
    kind: { type: 'string', enum: ['meeting', 'call'] },
    attendees: { type: 'array', minItems: 2, items: { $ref: '#/$defs/Person' } },
    rooms: { type: 'array', maxItems: 0, items: { type: 'string' } },
    priority: { type: 'integer', minimum: 20, maximum: 30 },
    note: { anyOf: [{ type: 'string' }, { type: 'null' }] },
  },
  $defs: {
    Person: { type: 'object', additionalProperties: false, required: ['name', 'age', 'id'],
      properties: { name: { type: 'string' }, age: { type: 'number', exclusiveMinimum: 100 }, id: { type: 'string', format: 'uuid' } } },
  },
};

function assertEvent(v) {
  assert.deepEqual(Object.keys(v).sort(), EVENT_SCHEMA.required.slice().sort());
  assert.ok(typeof v.title === 'string' && v.title.length >= 12, v.title);
  assert.ok(!Number.isNaN(Date.parse(v.when)) && /T/.test(v.when), v.when);
  assert.ok(['meeting', 'call'].includes(v.kind));
  assert.ok(v.attendees.length >= 2);
  for (const p of v.attendees) {
    assert.deepEqual(Object.keys(p).sort(), ['age', 'id', 'name']);
    assert.equal(typeof p.name, 'string');
    assert.ok(p.age > 100);
    assert.match(p.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  }
  assert.deepEqual(v.rooms, []);
  assert.ok(Number.isInteger(v.priority) && v.priority >= 20 && v.priority <= 30);
  assert.equal(typeof v.note, 'string');
}

test('response_format json_schema answers with JSON that conforms to the schema, whole or streamed, and json_object with a JSON object', async (t) => {
  const s = await sim(t);
  const messages = [{ role: 'user', content: 'Plan a meeting.' }];
  const response_format = { type: 'json_schema', json_schema: { name: 'event', strict: true, schema: EVENT_SCHEMA } };
  const whole = await json(s, '/v1/chat/completions', { model: 'sim-chat', messages, response_format });
  const content = whole.choices[0].message.content;
  assertEvent(JSON.parse(content));
  assert.equal(whole.choices[0].finish_reason, 'stop');
  assert.equal(whole.usage.completion_tokens, countTokens(content), 'billed by the JSON text\'s tokens');
  const chunks = await stream(s, '/v1/chat/completions', { model: 'sim-chat', messages, response_format });
  assert.equal(chunks.map((c) => c.choices[0].delta.content ?? '').join(''), content, 'the stream carries the same JSON');
  const reasoned = await json(s, '/v1/chat/completions', { model: 'sim-reasoner', messages, response_format });
  assertEvent(JSON.parse(reasoned.choices[0].message.content));
  const obj = await json(s, '/v1/chat/completions', { model: 'sim-chat', messages, response_format: { type: 'json_object' } });
  const parsed = JSON.parse(obj.choices[0].message.content);
  assert.ok(parsed && typeof parsed === 'object' && !Array.isArray(parsed));
  const text = await json(s, '/v1/chat/completions', { model: 'sim-chat', messages, response_format: { type: 'text' } });
  assert.throws(() => JSON.parse(text.choices[0].message.content));
  // max_tokens cuts the JSON short, and says so.
  const cut = await json(s, '/v1/chat/completions', { model: 'sim-chat', messages, response_format, max_tokens: 5 });
  assert.equal(cut.choices[0].finish_reason, 'length');
  assert.equal(cut.usage.completion_tokens, 5);
  for (const [bad, param] of [[{ type: 'yaml' }, 'response_format.type'], [{ type: 'json_schema', json_schema: { schema: {} } }, 'response_format.json_schema.name'], ['json', 'response_format']]) {
    const res = await post(s, '/v1/chat/completions', { model: 'sim-chat', messages, response_format: bad });
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.param, param);
  }
});

test('a reasoning model thinks first, in reasoning_content, and counts those tokens inside completion_tokens', async (t) => {
  const s = await sim(t);
  const body = { model: 'sim-reasoner', messages: [{ role: 'user', content: 'Why is the sky blue?' }] };
  const r = await json(s, '/v1/chat/completions', body);
  const m = r.choices[0].message;
  const R = countTokens(m.reasoning_content);
  assert.ok(R >= 8 && R <= 24, `${R} reasoning tokens`);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, R);
  assert.equal(r.usage.completion_tokens, R + countTokens(m.content));
  const chunks = await stream(s, '/v1/chat/completions', { ...body, stream_options: { include_usage: true } });
  const kinds = chunks.flatMap((c) => c.choices).map((ch) => (ch.delta.reasoning_content ? 'r' : ch.delta.content ? 'c' : '-')).join('');
  assert.match(kinds, /^-r+c+-$/, 'role, reasoning, content, finish');
  const thought = chunks.flatMap((c) => c.choices).filter((ch) => ch.delta.reasoning_content).map((ch) => ch.delta.reasoning_content).join('');
  assert.equal(thought, m.reasoning_content);
  assert.deepEqual(chunks.at(-1).usage, r.usage);
  const capped = await json(s, '/v1/chat/completions', { ...body, max_tokens: R + 2 });
  assert.equal(capped.usage.completion_tokens, R + 2, 'max_tokens covers reasoning and content together');
  assert.equal(countTokens(capped.choices[0].message.content), 2);
  assert.equal(capped.choices[0].finish_reason, 'length');
});

test('logprobs with top_logprobs gives one deterministic entry per content token', async (t) => {
  const s = await sim(t);
  const body = { ...user('Be sure.'), logprobs: true, top_logprobs: 3 };
  const a = await json(s, '/v1/chat/completions', body);
  const b = await json(s, '/v1/chat/completions', body);
  const lp = a.choices[0].logprobs;
  assert.deepEqual(lp, b.choices[0].logprobs);
  assert.equal(lp.refusal, null);
  assert.equal(lp.content.map((e) => e.token).join(''), a.choices[0].message.content);
  for (const e of lp.content) {
    assert.ok(e.logprob <= 0);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.equal(new Set(e.top_logprobs.map((x) => x.token)).size, 3);
  }
  const chunks = await stream(s, '/v1/chat/completions', body);
  assert.deepEqual(contentDeltas(chunks).map((d) => d.logprobs.content[0]), lp.content);
});

test('legacy completions answer each prompt with text_completion choices, defaulting to 16 tokens', async (t) => {
  const s = await sim(t);
  const r = await json(s, '/v1/completions', { model: 'sim-chat', prompt: 'Once upon a time,' });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-[0-9a-f]+$/);
  assert.deepEqual(Object.keys(r.choices[0]).sort(), ['finish_reason', 'index', 'logprobs', 'text']);
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.completion_tokens, 16);
  assert.equal(countTokens(r.choices[0].text), 16);
  const many = await json(s, '/v1/completions', { model: 'sim-chat', prompt: ['Once upon a time,', 'The end.'], n: 2, max_tokens: 40 });
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.equal(many.usage.prompt_tokens, 5 + 3);
  assert.equal(many.usage.completion_tokens, many.choices.reduce((a, c) => a + countTokens(c.text), 0));
  assert.ok(many.choices[0].text.startsWith(r.choices[0].text), 'the same prompt starts the same way');
  const chunks = await stream(s, '/v1/completions', { model: 'sim-chat', prompt: 'Once upon a time,', stream_options: { include_usage: true } });
  for (const c of chunks) assert.equal(c.object, 'text_completion');
  const texts = chunks.flatMap((c) => c.choices).filter((ch) => ch.text);
  assert.equal(texts.map((ch) => ch.text).join(''), r.choices[0].text);
  assert.equal(texts.length, 16);
  assert.equal(chunks.at(-2).choices[0].finish_reason, r.choices[0].finish_reason);
  assert.deepEqual(chunks.at(-1).usage, r.usage);
});

test('embeddings are deterministic unit vectors, and base64 decodes to the same little-endian floats', async (t) => {
  const s = await sim(t);
  const f = await json(s, '/v1/embeddings', { model: 'sim-embed', input: ['red apple', 'blue sea!'] });
  assert.equal(f.object, 'list');
  assert.equal(f.model, 'sim-embed');
  assert.deepEqual(f.usage, { prompt_tokens: 2 + 3, total_tokens: 5 });
  assert.deepEqual(f.data.map((d) => [d.object, d.index, d.embedding.length]), [['embedding', 0, 384], ['embedding', 1, 384]]);
  for (const d of f.data) assert.ok(Math.abs(Math.hypot(...d.embedding) - 1) < 1e-5, 'L2-normalised');
  assert.notDeepEqual(f.data[0].embedding, f.data[1].embedding);
  const again = await json(s, '/v1/embeddings', { model: 'sim-embed', input: 'red apple' });
  assert.deepEqual(again.data[0].embedding, f.data[0].embedding);
  const b = await json(s, '/v1/embeddings', { model: 'sim-embed', input: ['red apple'], encoding_format: 'base64' });
  const buf = Buffer.from(b.data[0].embedding, 'base64');
  assert.equal(buf.length, 384 * 4);
  const decoded = Array.from({ length: 384 }, (_, i) => buf.readFloatLE(i * 4));
  assert.deepEqual(decoded, f.data[0].embedding);
  const short = await json(s, '/v1/embeddings', { model: 'sim-embed', input: 'red apple', dimensions: 8 });
  const v = short.data[0].embedding;
  assert.equal(v.length, 8);
  assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-5);
  const k = f.data[0].embedding[0] / v[0];
  for (let i = 0; i < 8; i++) assert.ok(Math.abs(f.data[0].embedding[i] - v[i] * k) < 1e-5, 'a shortened vector is the full one\'s prefix, renormalised');
  const ids = await json(s, '/v1/embeddings', { model: 'sim-embed', input: [[1, 2, 3], [4, 5]] });
  assert.equal(ids.usage.prompt_tokens, 5);
  assert.equal(ids.data.length, 2);
  const bad = await post(s, '/v1/embeddings', { model: 'sim-embed', input: 'x', dimensions: 385 });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.param, 'dimensions');
});

test('models are listed and retrieved as simulated, and unknown models, routes and /v1/responses are 404 envelopes', async (t) => {
  const s = await sim(t);
  const list = await (await fetch(`${s.url}/v1/models`)).json();
  assert.equal(list.object, 'list');
  assert.deepEqual(list.data.map((m) => m.id), DEFAULT_SIM_MODELS.map((m) => m.id));
  for (const m of list.data) {
    assert.equal(m.object, 'model');
    assert.equal(m.owned_by, 'tollgate-sim');
    assert.equal(m.simulated, true);
    assert.ok(Number.isInteger(m.created));
  }
  const one = await fetch(`${s.url}/v1/models/sim-reasoner`);
  assert.deepEqual(await one.json(), list.data[1]);
  const checks = [
    [fetch(`${s.url}/v1/models/gpt-9`), 404, 'model_not_found'],
    [post(s, '/v1/chat/completions', user('x')).then(() => post(s, '/v1/chat/completions', { ...user('x'), model: 'gpt-9' })), 404, 'model_not_found'],
    [post(s, '/v1/responses', { model: 'sim-chat', input: 'hi' }), 404, null],
    [fetch(`${s.url}/v2/anything`), 404, null],
    [fetch(`${s.url}/v1/chat/completions`), 404, null],
  ];
  for (const [pending, status, code] of checks) {
    const res = await pending;
    assert.equal(res.status, status);
    const { error } = await res.json();
    assert.deepEqual(Object.keys(error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(error.type, 'invalid_request_error');
    assert.equal(error.code, code);
  }
  const health = await fetch(`${s.url}/health`);
  assert.equal(health.status, 200);
  assert.equal(await health.text(), 'ok');
});

test('bad requests are 400 invalid_request_error envelopes naming the parameter', async (t) => {
  const s = await sim(t);
  const cases = [
    [{ messages: [{ role: 'user', content: 'x' }] }, 'model'],
    [{ model: 'sim-chat' }, 'messages'],
    [{ model: 'sim-chat', messages: [] }, 'messages'],
    [{ ...user('x'), n: 0 }, 'n'],
    [{ ...user('x'), max_tokens: -1 }, 'max_tokens'],
    [{ ...user('x'), stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    [{ ...user('x'), tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
    [{ model: 'sim-embed', messages: [{ role: 'user', content: 'x' }] }, 'model'],
  ];
  for (const [body, param] of cases) {
    const res = await post(s, '/v1/chat/completions', body);
    assert.equal(res.status, 400, JSON.stringify(body));
    const { error } = await res.json();
    assert.equal(error.type, 'invalid_request_error');
    assert.equal(error.param, param);
  }
  const wrongModel = await post(s, '/v1/embeddings', { model: 'sim-chat', input: 'x' });
  assert.equal(wrongModel.status, 400);
  const noPrompt = await post(s, '/v1/completions', { model: 'sim-chat' });
  assert.equal((await noPrompt.json()).error.param, 'prompt');
  const notJson = await fetch(`${s.url}/v1/chat/completions`, { method: 'POST', body: '{nope' });
  assert.equal(notJson.status, 400);
});

test('x-sim-fail-status answers with that status in an OpenAI envelope', async (t) => {
  const s = await sim(t);
  for (const [status, type] of [[500, 'server_error'], [503, 'server_error'], [429, 'rate_limit_error'], [400, 'invalid_request_error']]) {
    const res = await post(s, '/v1/chat/completions', { ...user('x'), stream: true }, { 'x-sim-fail-status': String(status) });
    assert.equal(res.status, status);
    assert.match(res.headers.get('content-type'), /application\/json/);
    const { error } = await res.json();
    assert.equal(error.type, type);
    assert.equal(typeof error.message, 'string');
  }
  const models = await fetch(`${s.url}/v1/models`, { headers: { 'x-sim-fail-status': '502' } });
  assert.equal(models.status, 502);
});

test('x-sim-hang never answers, and the sim keeps serving others', async (t) => {
  const s = await sim(t);
  const started = Date.now();
  await assert.rejects(post(s, '/v1/chat/completions', user('x'), { 'x-sim-hang': '1' }, AbortSignal.timeout(300)), { name: 'TimeoutError' });
  assert.ok(Date.now() - started >= 290);
  const ok = await post(s, '/v1/chat/completions', user('x'));
  assert.equal(ok.status, 200);
});

test('x-sim-truncate-after kills a stream after N content tokens, with no finish chunk, usage or [DONE]', async (t) => {
  const s = await sim(t);
  for (const delay of ['0', '2']) {
    const res = await post(s, '/v1/chat/completions', { ...user('x'), stream: true, stream_options: { include_usage: true } }, { 'x-sim-truncate-after': '3', 'x-sim-token-delay-ms': delay });
    assert.equal(res.status, 200);
    const { text, cut } = await readUntilCut(res);
    assert.ok(cut, 'the body ends in a network error');
    const chunks = text.split('\n\n').filter(Boolean).map((e) => JSON.parse(e.slice(6)));
    assert.equal(contentDeltas(chunks).length, 3);
    assert.ok(chunks.every((c) => c.choices.length === 1 && c.choices[0].finish_reason === null && c.usage === null));
    assert.doesNotMatch(text, /\[DONE\]/);
  }
  const whole = await post(s, '/v1/chat/completions', user('x'), { 'x-sim-truncate-after': '3' });
  assert.equal(whole.status, 200);
  const { text, cut } = await readUntilCut(whole);
  assert.ok(cut);
  assert.ok(text.length > 0 && text.length < Number(whole.headers.get('content-length')));
  assert.equal(s.stats().completedStreams, 0);
});

test('x-sim-malformed sends a body that is not JSON, and one bad event in a stream', async (t) => {
  const s = await sim(t);
  const res = await post(s, '/v1/chat/completions', user('x'), { 'x-sim-malformed': '1' });
  assert.equal(res.status, 200);
  const body = await res.text();
  assert.ok(body.startsWith('{'));
  assert.throws(() => JSON.parse(body));
  const sres = await post(s, '/v1/chat/completions', { ...user('x'), stream: true }, { 'x-sim-malformed': '1' });
  const ev = events(await sres.text());
  const bad = ev.filter((e) => { try { JSON.parse(e); return false; } catch { return e !== '[DONE]'; } });
  assert.deepEqual(bad, ['{not json']);
  assert.equal(ev.at(-1), '[DONE]');
});

test('tokens are spaced by tokenDelayMs, which x-sim-token-delay-ms overrides per request', async (t) => {
  const s = await sim(t, { tokenDelayMs: 25 });
  const timed = async (headers, stream) => {
    const started = performance.now();
    const res = await post(s, '/v1/chat/completions', { ...user('x'), max_tokens: 6, stream }, headers);
    await res.text();
    return performance.now() - started;
  };
  assert.ok(await timed({}, true) >= 6 * 25 - 5, 'the option delays every token of a stream');
  assert.ok(await timed({}, false) >= 6 * 25 - 5, 'and the whole answer of a non-streamed request');
  assert.ok(await timed({ 'x-sim-token-delay-ms': '0' }, true) < 100, 'the header turns it off');
  const res = await post(s, '/v1/chat/completions', { ...user('x'), max_tokens: 4, stream: true }, { 'x-sim-token-delay-ms': '60' });
  const reader = res.body.getReader();
  const arrivals = [];
  let text = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
    arrivals.push([performance.now(), (text.match(/"content":"[^"]/g) ?? []).length]);
  }
  const firstToken = arrivals.find(([, n]) => n >= 1)[0];
  const lastToken = arrivals.find(([, n]) => n >= 4)[0];
  assert.ok(lastToken - firstToken >= 3 * 60 - 10, 'tokens arrive one delay apart');
});

test('a client dropping a slow stream is counted as aborted, and the sim stops writing to it', async (t) => {
  const s = await sim(t);
  const proto = http.ServerResponse.prototype;
  const write = proto.write;
  let writes = 0;
  proto.write = function (...args) { writes++; return write.apply(this, args); };
  t.after(() => { proto.write = write; });
  const ctl = new AbortController();
  const res = await post(s, '/v1/chat/completions', { ...user('x'), stream: true, max_tokens: 60 }, { 'x-sim-token-delay-ms': '30' }, ctl.signal);
  const reader = res.body.getReader();
  let text = '';
  while ((text.match(/"content":"[^"]/g) ?? []).length < 3) text += Buffer.from((await reader.read()).value).toString();
  assert.equal(s.stats().activeStreams, 1);
  ctl.abort();
  const deadline = Date.now() + 2000;
  while (s.stats().abortedStreams === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  const after = writes;
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(writes, after, 'no writes after the client left');
  assert.ok(after < 10, `${after} writes for the few tokens sent`);
  assert.deepEqual(s.stats(), { requests: 1, activeStreams: 0, abortedStreams: 1, completedStreams: 0 });
});

test('finished streams are counted as completed, and /sim/stats reports the same numbers over HTTP', async (t) => {
  const s = await sim(t);
  await stream(s, '/v1/chat/completions', user('x'));
  await stream(s, '/v1/completions', { model: 'sim-chat', prompt: 'x' });
  await json(s, '/v1/chat/completions', user('x'));
  const stats = await (await fetch(`${s.url}/sim/stats`)).json();
  assert.deepEqual(stats, { requests: 3, activeStreams: 0, abortedStreams: 0, completedStreams: 2 });
  assert.deepEqual(s.stats(), stats);
});

test('connections are kept alive between requests', async (t) => {
  const s = await sim(t);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  const ports = [];
  for (let i = 0; i < 3; i++) {
    await new Promise((resolve, reject) => {
      http.get(`${s.url}/v1/models`, { agent }, (res) => {
        ports.push(res.socket.localPort);
        assert.equal(res.headers.connection, 'keep-alive');
        res.resume().on('end', resolve);
      }).on('error', reject);
    });
  }
  assert.equal(new Set(ports).size, 1, 'one socket served all three');
});

test('`cli.js sim --listen` serves the simulated models over HTTP until SIGTERM', async () => {
  const { spawn } = await import('node:child_process');
  const { join } = await import('node:path');
  const { ROOT } = await import('./helpers/gateway.mjs');
  const proc = spawn(process.execPath, [join(ROOT, 'dist', 'cli.js'), 'sim', '--listen', '127.0.0.1:0', '--token-delay-ms', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((r) => proc.once('exit', (code) => r(code)));
  try {
    const url = await new Promise((resolve, reject) => {
      let out = '';
      proc.stdout.on('data', (d) => { out += d; const m = /"url":"(http:[^"]+)"/.exec(out); if (m) resolve(m[1]); });
      proc.once('exit', (code) => reject(new Error(`sim exited with ${code}: ${out}`)));
    });
    const models = await (await fetch(`${url}/v1/models`)).json();
    assert.ok(models.data.length > 0 && models.data.every((m) => m.simulated === true && m.owned_by === 'tollgate-sim'));
    const chat = await (await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }) })).json();
    assert.equal(chat.object, 'chat.completion');
    assert.equal(chat.usage.completion_tokens, 4);
  } finally {
    proc.kill('SIGTERM');
  }
  assert.equal(await exited, 0);
});

// The official `openai` npm client against a real gateway on its embedded default: chat (plain,
// streamed, include_usage, tools), completions, embeddings, responses, models, the /v1 alias, the
// refusals as typed errors, and after each billed call the balance moved by exactly price × usage.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startGateway, costNano, HELLO, WEATHER_TOOL } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

/** A fresh $5 account and a client for its key. */
async function fresh(base = '/v1', opts = {}) {
  const acct = await gw.account('5', opts);
  return { ...acct, client: gw.client(acct.key, base) };
}

async function assertDebited(key, before, nano) {
  assert.ok(nano > 0n);
  const after = await gw.settledBalance(key, before);
  assert.equal(before - after, nano,
    `balance moved by ${before - after} nanodollars (from ${before} to ${after}); price × usage is ${nano}`);
}

async function assertNotDebited(key, before, waitMs = 0) {
  if (waitMs) await new Promise((r) => setTimeout(r, waitMs));
  assert.equal(await gw.balance(key), before, 'a refused request moved the balance');
}

function assertWeatherArguments(text) {
  const args = JSON.parse(text);
  assert.equal(typeof args, 'object');
  assert.ok(args !== null && !Array.isArray(args));
  assert.equal(typeof args.city, 'string', 'the required "city" argument is a string');
  for (const k of Object.keys(args)) assert.ok(['city', 'unit'].includes(k), `unexpected argument ${k}`);
  if ('unit' in args) assert.ok(['c', 'f'].includes(args.unit));
}

async function collect(stream) {
  const out = [];
  for await (const item of stream) out.push(item);
  return out;
}

// ---- chat ------------------------------------------------------------------------------------------

test('a chat completion answers as the assistant and bills exactly price × usage', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const { data: completion, response } = await client.chat.completions.create({ model: 'sim-chat', messages: HELLO }).withResponse();
  assert.equal(response.status, 200);
  assert.match(response.headers.get('x-request-id'), /^req_/);
  assert.equal(completion.object, 'chat.completion');
  assert.equal(completion.model, 'sim-chat');
  const [choice] = completion.choices;
  assert.equal(choice.message.role, 'assistant');
  assert.ok(choice.message.content.trim());
  assert.equal(choice.finish_reason, 'stop');
  const u = completion.usage;
  assert.ok(u.prompt_tokens > 0 && u.completion_tokens > 0);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  await assertDebited(key, before, costNano('sim-chat', u.prompt_tokens, u.completion_tokens));
});

test('the alias tollgate-27b answers and bills at sim-chat prices', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const completion = await client.chat.completions.create({ model: 'tollgate-27b', messages: HELLO });
  assert.ok(completion.choices[0].message.content);
  const u = completion.usage;
  await assertDebited(key, before, costNano('sim-chat', u.prompt_tokens, u.completion_tokens));
});

test('a streamed chat without include_usage sends no usage chunk but is still billed', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const chunks = await collect(await client.chat.completions.create({ model: 'sim-chat', messages: HELLO, stream: true }));
  assert.ok(chunks.length > 2);
  assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
  assert.ok(chunks.every((c) => c.usage == null), 'a usage chunk reached a client that did not ask for one');
  assert.ok(chunks.every((c) => c.choices.length === 1), 'a chunk with no choices reached the client');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
  const text = chunks.map((c) => c.choices[0].delta.content ?? '').join('');
  assert.ok(text.trim());
  const afterFirst = await gw.settledBalance(key, before);

  // The simulated upstream is deterministic: the same stream with include_usage tells what the first
  // one produced, and both must cost exactly that.
  const again = await collect(await client.chat.completions.create({
    model: 'sim-chat', messages: HELLO, stream: true, stream_options: { include_usage: true } }));
  assert.equal(again.filter((c) => c.choices.length).map((c) => c.choices[0].delta.content ?? '').join(''), text);
  const u = again.at(-1).usage;
  const expected = costNano('sim-chat', u.prompt_tokens, u.completion_tokens);
  await assertDebited(key, afterFirst, expected);
  assert.equal(before - afterFirst, expected);
});

test('a streamed chat with include_usage ends with exactly one usage chunk with no choices', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const chunks = await collect(await client.chat.completions.create({
    model: 'sim-chat', messages: HELLO, stream: true, stream_options: { include_usage: true } }));
  const withUsage = chunks.filter((c) => c.usage != null);
  assert.equal(withUsage.length, 1, `${withUsage.length} chunks carried usage`);
  const last = chunks.at(-1);
  assert.equal(last, withUsage[0], 'the usage chunk is not the last one');
  assert.deepEqual(last.choices, []);
  assert.ok(chunks.slice(0, -1).every((c) => c.choices.length === 1));
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'stop');
  const u = last.usage;
  assert.ok(u.prompt_tokens > 0 && u.completion_tokens > 0);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  await assertDebited(key, before, costNano('sim-chat', u.prompt_tokens, u.completion_tokens));
});

test('a function tool comes back as a tool call whose arguments are JSON for its schema', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const completion = await client.chat.completions.create({
    model: 'sim-chat', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools: [WEATHER_TOOL] });
  const [choice] = completion.choices;
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  const [call] = choice.message.tool_calls;
  assert.equal(call.type, 'function');
  assert.ok(call.id);
  assert.equal(call.function.name, 'get_weather');
  assertWeatherArguments(call.function.arguments);
  const u = completion.usage;
  await assertDebited(key, before, costNano('sim-chat', u.prompt_tokens, u.completion_tokens));
});

test('a streamed tool call assembles into JSON arguments for its schema', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const chunks = await collect(await client.chat.completions.create({
    model: 'sim-chat', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools: [WEATHER_TOOL],
    stream: true, stream_options: { include_usage: true } }));
  const calls = new Map();
  for (const chunk of chunks) {
    for (const choice of chunk.choices) {
      for (const d of choice.delta.tool_calls ?? []) {
        const c = calls.get(d.index) ?? { id: '', name: '', args: '' };
        c.id += d.id ?? '';
        c.name += d.function?.name ?? '';
        c.args += d.function?.arguments ?? '';
        calls.set(d.index, c);
      }
    }
  }
  assert.deepEqual([...calls.keys()], [0]);
  const call = calls.get(0);
  assert.ok(call.id);
  assert.equal(call.name, 'get_weather');
  assertWeatherArguments(call.args);
  assert.deepEqual(chunks.flatMap((c) => c.choices.map((x) => x.finish_reason).filter(Boolean)), ['tool_calls']);
  const u = chunks.at(-1).usage;
  await assertDebited(key, before, costNano('sim-chat', u.prompt_tokens, u.completion_tokens));
});

test('the reasoner reports reasoning tokens and bills them once as output', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const completion = await client.chat.completions.create({ model: 'sim-reasoner', messages: HELLO });
  const u = completion.usage;
  const reasoning = u.completion_tokens_details?.reasoning_tokens;
  assert.ok(reasoning > 0 && reasoning < u.completion_tokens, `reasoning_tokens ${reasoning}`);
  await assertDebited(key, before, costNano('sim-reasoner', u.prompt_tokens, u.completion_tokens));
});

test('modalities ["text"] is accepted', async () => {
  const { client } = await fresh();
  const completion = await client.chat.completions.create({ model: 'sim-chat', messages: HELLO, modalities: ['text'] });
  assert.ok(completion.choices[0].message.content);
});

// ---- completions, embeddings, models ----------------------------------------------------------------

test('a legacy completion returns text and bills exactly price × usage', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const completion = await client.completions.create({ model: 'sim-chat', prompt: 'Once upon a time', max_tokens: 12 });
  assert.equal(completion.object, 'text_completion');
  assert.ok(completion.choices[0].text.trim());
  assert.ok(['stop', 'length'].includes(completion.choices[0].finish_reason));
  const u = completion.usage;
  assert.ok(u.prompt_tokens > 0 && u.completion_tokens > 0 && u.completion_tokens <= 12);
  await assertDebited(key, before, costNano('sim-chat', u.prompt_tokens, u.completion_tokens));
});

test('a streamed legacy completion with include_usage ends with one usage chunk and bills it', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const chunks = await collect(await client.completions.create({
    model: 'sim-chat', prompt: 'Once upon a time', max_tokens: 12, stream: true, stream_options: { include_usage: true } }));
  const withUsage = chunks.filter((c) => c.usage != null);
  assert.equal(withUsage.length, 1);
  assert.equal(chunks.at(-1), withUsage[0]);
  assert.deepEqual(chunks.at(-1).choices, []);
  assert.ok(chunks.slice(0, -1).map((c) => c.choices[0].text).join('').trim());
  const u = chunks.at(-1).usage;
  assert.ok(u.completion_tokens > 0 && u.completion_tokens <= 12);
  await assertDebited(key, before, costNano('sim-chat', u.prompt_tokens, u.completion_tokens));
});

const EMBED_INPUT = ['The gateway meters every token.', 'Balances are integer nanodollars.'];

test('float embeddings return one 384-dimension vector per input and bill input tokens', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const res = await client.embeddings.create({ model: 'sim-embed', input: EMBED_INPUT, encoding_format: 'float' });
  assert.equal(res.object, 'list');
  assert.deepEqual(res.data.map((d) => d.index), [0, 1]);
  for (const d of res.data) {
    assert.equal(d.object, 'embedding');
    assert.equal(d.embedding.length, 384);
    assert.ok(d.embedding.every(Number.isFinite));
  }
  assert.notDeepEqual(res.data[0].embedding, res.data[1].embedding);
  assert.ok(res.usage.prompt_tokens > 0);
  await assertDebited(key, before, costNano('sim-embed', res.usage.prompt_tokens));
});

test('the client asks for base64 embeddings by default and decodes them to the float vectors', async () => {
  const { key, client } = await fresh();
  const floats = await client.embeddings.create({ model: 'sim-embed', input: EMBED_INPUT, encoding_format: 'float' });
  const sent = [];
  const watched = new OpenAI({
    apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0,
    fetch: (url, init) => { sent.push(JSON.parse(init.body)); return fetch(url, init); },
  });
  const before = await gw.balance(key);
  const decoded = await watched.embeddings.create({ model: 'sim-embed', input: EMBED_INPUT });
  assert.equal(sent.length, 1);
  assert.equal(sent[0].encoding_format, 'base64', 'the client asked for base64 on the wire');
  decoded.data.forEach((d, i) => {
    assert.equal(d.embedding.length, 384);
    d.embedding.forEach((x, j) => {
      const want = floats.data[i].embedding[j];
      assert.ok(Math.abs(x - want) <= 1e-6 * Math.abs(want) + 1e-7, `[${i}][${j}] ${x} vs ${want}`);
    });
  });
  await assertDebited(key, before, costNano('sim-embed', decoded.usage.prompt_tokens));
});

test('explicit base64 embeddings come back as strings of 384 float32s', async () => {
  const { client } = await fresh();
  const res = await client.embeddings.create({ model: 'sim-embed', input: EMBED_INPUT, encoding_format: 'base64' });
  for (const d of res.data) {
    assert.equal(typeof d.embedding, 'string');
    assert.equal(Buffer.from(d.embedding, 'base64').length, 384 * 4);
  }
});

test('the model list shows the simulated models, and one can be retrieved', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const page = await client.models.list();
  assert.deepEqual(page.data.map((m) => m.id).sort(), ['sim-chat', 'sim-embed', 'sim-realtime', 'sim-reasoner', 'sim-sts', 'sim-stt', 'sim-tts', 'sim-tts-clone']);
  for (const m of page.data) {
    assert.equal(m.object, 'model');
    assert.equal(m.owned_by, 'tollgate-sim');
    assert.equal(m.simulated, true);
    assert.ok(Number.isInteger(m.created) && m.created > 0);
  }
  const model = await client.models.retrieve('sim-embed');
  assert.equal(model.id, 'sim-embed');
  assert.equal(model.owned_by, 'tollgate-sim');
  await assertNotDebited(key, before, 300);
});

// ---- responses -------------------------------------------------------------------------------------

const PROMPT = 'Write one sentence about toll roads.';

test('a response has output_text and usage and bills exactly price × usage', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const response = await client.responses.create({ model: 'sim-chat', input: PROMPT });
  assert.equal(response.object, 'response');
  assert.match(response.id, /^resp_/);
  assert.equal(response.status, 'completed');
  assert.ok(response.output_text.trim());
  assert.equal(response.output[0].type, 'message');
  const u = response.usage;
  assert.ok(u.input_tokens > 0 && u.output_tokens > 0);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  await assertDebited(key, before, costNano('sim-chat', u.input_tokens, u.output_tokens));
});

test('a streamed response sends created, text deltas and completed, and bills the completed usage', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const events = await collect(await client.responses.create({ model: 'sim-chat', input: PROMPT, stream: true }));
  const types = events.map((e) => e.type);
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  assert.ok(types.includes('response.output_text.delta'));
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.ok(text.trim());
  const completed = events.at(-1).response;
  assert.equal(completed.status, 'completed');
  assert.equal(completed.id, events[0].response.id);
  const finalText = completed.output.flatMap((o) => o.content ?? []).filter((c) => c.type === 'output_text').map((c) => c.text).join('');
  assert.equal(finalText, text);
  const u = completed.usage;
  assert.ok(u.input_tokens > 0 && u.output_tokens > 0);
  await assertDebited(key, before, costNano('sim-chat', u.input_tokens, u.output_tokens));
});

test('a streamed response cut by max_output_tokens ends with response.incomplete and bills what was produced', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const events = await collect(await client.responses.create({ model: 'sim-chat', input: PROMPT, stream: true, max_output_tokens: 4 }));
  const types = events.map((e) => e.type);
  assert.equal(types.at(-1), 'response.incomplete');
  assert.ok(!types.includes('response.completed'));
  const final = events.at(-1).response;
  assert.equal(final.status, 'incomplete');
  assert.equal(final.incomplete_details.reason, 'max_output_tokens');
  assert.equal(final.usage.output_tokens, 4);
  await assertDebited(key, before, costNano('sim-chat', final.usage.input_tokens, 4));
});

// ---- routes ----------------------------------------------------------------------------------------

for (const base of ['/v1', '/alpha/v1']) {
  test(`a client pointed at ${base} chats, lists models and is billed`, async () => {
    const { key, client } = await fresh(base);
    const before = await gw.balance(key);
    const { data: completion, response } = await client.chat.completions.create({ model: 'sim-chat', messages: HELLO }).withResponse();
    assert.equal(response.url, `${gw.url}${base}/chat/completions`);
    assert.ok(completion.choices[0].message.content);
    const u = completion.usage;
    await assertDebited(key, before, costNano('sim-chat', u.prompt_tokens, u.completion_tokens));
    assert.deepEqual((await client.models.list()).data.map((m) => m.id).sort(), ['sim-chat', 'sim-embed', 'sim-realtime', 'sim-reasoner', 'sim-sts', 'sim-stt', 'sim-tts', 'sim-tts-clone']);
  });
}

// ---- refusals --------------------------------------------------------------------------------------

const CHAT_REJECTED = [
  ['audio', { audio: { voice: 'alloy', format: 'wav' } }],
  ['prediction', { prediction: { type: 'content', content: 'Hello gateway' } }],
  ['web_search_options', { web_search_options: {} }],
  ['functions', { functions: [{ name: 'get_weather', parameters: { type: 'object' } }] }],
  ['function_call', { function_call: 'auto' }],
  ['modalities', { modalities: ['text', 'audio'] }],
  ['modalities', { modalities: ['audio'] }],
];

for (const [param, extra] of CHAT_REJECTED) {
  test(`chat refuses ${JSON.stringify(extra)} with a BadRequestError naming ${param}`, async () => {
    const { key, client } = await fresh();
    const before = await gw.balance(key);
    await assert.rejects(client.chat.completions.create({ model: 'sim-chat', messages: HELLO, ...extra }), (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `got ${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 400);
      assert.equal(err.code, 'unsupported_parameter');
      assert.equal(err.param, param);
      return true;
    });
    await assertNotDebited(key, before);
  });
}

const RESPONSES_REJECTED = [
  ['previous_response_id', { previous_response_id: 'resp_0123456789abcdef' }],
  ['conversation', { conversation: 'conv_0123456789abcdef' }],
  ['background', { background: true }],
  ['prompt_cache_key', { prompt_cache_key: 'tollgate-test' }],
];

for (const [param, extra] of RESPONSES_REJECTED) {
  test(`responses refuses ${JSON.stringify(extra)} with a BadRequestError naming ${param}`, async () => {
    const { client } = await fresh();
    await assert.rejects(client.responses.create({ model: 'sim-chat', input: 'hi', ...extra }), (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `got ${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.code, 'unsupported_parameter');
      assert.equal(err.param, param);
      return true;
    });
  });
}

test('responses accepts background false since it asks for nothing unsupported', async () => {
  // `background: false` is the API's default (run in the foreground), which is what the gateway does;
  // by the same rule as `modalities: ["text"]`, only a value the gateway cannot honour is refused.
  const { client } = await fresh();
  const response = await client.responses.create({ model: 'sim-chat', input: 'hi', background: false });
  assert.equal(response.status, 'completed');
});

test('a malformed body is an UnprocessableEntityError naming the bad field', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  await assert.rejects(client.chat.completions.create({ model: 'sim-chat', messages: 'not a list' }), (err) => {
    assert.ok(err instanceof OpenAI.UnprocessableEntityError, `got ${err?.constructor?.name}`);
    assert.equal(err.status, 422);
    assert.equal(err.param, 'messages');
    return true;
  });
  await assertNotDebited(key, before);
});

test('a wrong value is an UnprocessableEntityError that names the field, the range and the value sent', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  await assert.rejects(client.chat.completions.create({ model: 'sim-chat', messages: HELLO, temperature: 5 }), (err) => {
    assert.ok(err instanceof OpenAI.UnprocessableEntityError, `got ${err?.constructor?.name}`);
    assert.equal(err.param, 'temperature');
    assert.equal(err.error.message, '`temperature` must be a number from 0 to 2; got 5.');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model: 'sim-chat', messages: [{ role: 'robot', content: 'hi' }] }), (err) => {
    assert.ok(err instanceof OpenAI.UnprocessableEntityError);
    assert.equal(err.param, 'messages[0].role');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model: 'sim-chat', messages: HELLO, max_completion_tokens: 100_000 }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `got ${err?.constructor?.name}`);
    assert.equal(err.code, 'invalid_value');
    assert.equal(err.param, 'max_completion_tokens');
    assert.match(err.error.message, /at most 4096 output tokens/);
    return true;
  });
  await assertNotDebited(key, before);
});

test('an unknown model is a NotFoundError that suggests the closest model', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  await assert.rejects(client.chat.completions.create({ model: 'sim-chta', messages: HELLO }), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError, `got ${err?.constructor?.name}`);
    assert.equal(err.status, 404);
    assert.equal(err.code, 'model_not_found');
    assert.equal(err.param, 'model');
    assert.equal(err.error.message, 'The model `sim-chta` does not exist. Did you mean `sim-chat`?');
    return true;
  });
  await assert.rejects(client.embeddings.create({ model: 'sim-embd', input: 'x' }), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError);
    assert.equal(err.error.message, 'The model `sim-embd` does not exist. Did you mean `sim-embed`?');
    return true;
  });
  await assertNotDebited(key, before);
});

test('a wrong key is an AuthenticationError', async () => {
  const bogus = `svc_live_${'x'.repeat(40)}`;
  for (const key of [bogus, 'sk-not-a-tollgate-key']) {
    await assert.rejects(gw.client(key).chat.completions.create({ model: 'sim-chat', messages: HELLO }), (err) => {
      assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err?.constructor?.name}`);
      assert.equal(err.status, 401);
      assert.equal(err.code, 'invalid_api_key');
      assert.ok(!err.message.includes(key), 'the error echoes the whole key');
      return true;
    });
  }
});

test('a revoked key is refused with an AuthenticationError within a second or two', async () => {
  const { prefix, client } = await fresh();
  await client.models.list();
  await gw.cli('key', 'revoke', prefix);
  const deadline = Date.now() + 3000;
  for (;;) {
    try {
      await client.models.list();
    } catch (err) {
      assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err?.constructor?.name}`);
      assert.equal(err.code, 'invalid_api_key');
      break;
    }
    assert.ok(Date.now() < deadline, 'the revoked key still works after 3 s');
    await new Promise((r) => setTimeout(r, 100));
  }
});

test('an account with no credit gets a 402 insufficient_balance APIError', async () => {
  const broke = await gw.account('0');
  await assert.rejects(gw.client(broke.key).chat.completions.create({ model: 'sim-chat', messages: HELLO }), (err) => {
    assert.ok(err instanceof OpenAI.APIError, `got ${err?.constructor?.name}`);
    assert.equal(err.status, 402);
    assert.equal(err.code, 'insufficient_balance');
    return true;
  });
  assert.equal(await gw.balance(broke.key), 0n);
});

test('a key past its spend limit gets a 402 key_spend_limit_reached APIError', async () => {
  const capped = await gw.account('5', { spendLimit: '0.000001', period: 'daily' });
  const client = gw.client(capped.key);
  await client.chat.completions.create({ model: 'sim-chat', messages: HELLO }); // one output token alone costs more than the $0.000001 ceiling
  assert.equal((await gw.keyInfo(capped.key)).nano.limit_remaining, 0n);
  await assert.rejects(client.chat.completions.create({ model: 'sim-chat', messages: HELLO }), (err) => {
    assert.ok(err instanceof OpenAI.APIError);
    assert.equal(err.status, 402);
    assert.equal(err.code, 'key_spend_limit_reached');
    return true;
  });
});

test('a key over its rpm gets a RateLimitError with retry-after and rate-limit headers, and nothing billed', async () => {
  const limited = await gw.account('5', { rpm: 1 });
  // The balance is read through another key of the account: every request with a key counts against
  // its rpm, key inspection included.
  const watcher = (await gw.cli('key', 'create', '--account', limited.accountId)).key;
  const client = gw.client(limited.key);
  await client.chat.completions.create({ model: 'sim-chat', messages: HELLO });
  const before = await gw.balance(watcher);
  await assert.rejects(client.chat.completions.create({ model: 'sim-chat', messages: HELLO }), (err) => {
    assert.ok(err instanceof OpenAI.RateLimitError, `got ${err?.constructor?.name}`);
    assert.equal(err.status, 429);
    assert.equal(err.code, 'rate_limit_exceeded');
    assert.ok(Number(err.headers.get('retry-after')) > 0);
    assert.equal(err.headers.get('x-ratelimit-limit-requests'), '1');
    assert.equal(err.headers.get('x-ratelimit-remaining-requests'), '0');
    assert.ok(err.headers.get('x-ratelimit-reset-requests'));
    return true;
  });
  const inspect = await fetch(`${gw.url}/svc/v1/key`, { headers: { authorization: `Bearer ${limited.key}` } });
  assert.equal(inspect.status, 429, 'unbilled requests count against rpm too');
  await assertNotDebited(watcher, before, 300);
});

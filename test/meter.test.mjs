// The stream meter on its own: what it forwards and what it counts, for every way a host may cut its
// bytes into reads, with LF or CRLF event endings, and for chunks it scans rather than parses.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SseMeter } from '../dist/meter/sse.js';
import { ResponsesSseMeter } from '../dist/meter/responses-sse.js';
import { JsonMeter } from '../dist/meter/json.js';
import { StreamJsonMeter } from '../dist/meter/stream-json.js';
import { usage as usageOf } from '../dist/exchange/usage.js';

const chunk = (delta, extra = {}) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta, logprobs: null, finish_reason: null }], ...extra })}\n\n`;
const USAGE = { prompt_tokens: 7, completion_tokens: 4, total_tokens: 11 };
const final = `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [], usage: USAGE })}\n\n`;
// Four chunks with output (one of them with multi-byte characters), two without, the usage chunk, the end.
const STREAM = [
  chunk({ role: 'assistant', content: '' }, { usage: null }),
  chunk({ content: 'Héllo' }, { usage: null }),
  chunk({ content: ' 日本 🙂' }, { usage: null }),
  chunk({ content: 'He said "usage":{"prompt_tokens":99} and "finish_reason":"x"' }, { usage: null }),
  chunk({ reasoning_content: 'hmm' }),
  chunk({}),
  final,
  'data: [DONE]\n\n',
].join('');

function run(text, opts, cut) {
  const m = new SseMeter({ stripUsageChunk: false, stripChunkUsage: false, ...opts });
  const bytes = Buffer.from(text);
  let out = '';
  for (let i = 0; i < bytes.length; i += cut) out += m.onData(bytes.subarray(i, i + cut)).toString();
  return { m, out };
}

test('a stream cut into reads of any size is forwarded byte for byte and counted the same', () => {
  for (const cut of [1, 2, 3, 5, 7, 64, 100_000]) {
    const { m, out } = run(STREAM, {}, cut);
    assert.equal(out, STREAM, `cut ${cut}`);
    assert.equal(m.producedTokens(), 4, `cut ${cut}`);
    assert.deepEqual(m.reported, { input: 7, output: 4, reasoning: 0 });
    assert.ok(m.final && m.done);
  }
});

test('CRLF event endings are split, metered and forwarded as they came', () => {
  const crlf = STREAM.replace(/\n\n/g, '\r\n\r\n');
  for (const cut of [1, 4, 100_000]) {
    const { m, out } = run(crlf, {}, cut);
    assert.equal(out, crlf);
    assert.equal(m.producedTokens(), 4);
    assert.ok(m.final && m.done);
  }
});

test('the usage chunk the client did not ask for is dropped, and text that looks like usage is not usage', () => {
  const { m, out } = run(STREAM, { stripUsageChunk: true }, 100_000);
  assert.equal(out, STREAM.replace(final, ''));
  assert.deepEqual(m.reported, { input: 7, output: 4, reasoning: 0 });
  const cut = run(STREAM.slice(0, STREAM.indexOf(final)), {}, 9).m; // dropped before the usage chunk
  assert.equal(cut.reported, null);
  assert.equal(cut.producedTokens(), 4);
  assert.equal(cut.final, false);
});

test('what counts as produced output: text, reasoning and tool-call arguments, per choice; not empty or null', () => {
  const cases = [
    [chunk({ content: 'x' }), 1],
    [chunk({ content: '' }), 0],
    [chunk({ content: null }), 0],
    [chunk({ content: '"' }), 1],
    [chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'content', arguments: '' } }] }), 0],
    [chunk({ tool_calls: [{ index: 0, function: { arguments: '{"a":' } }] }), 1],
    [`data: {"choices": [{"index": 0, "text": "spaced", "finish_reason": null}]}\n\n`, 1], // legacy completions, spaced JSON
    [`data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null},{"index":1,"delta":{"content":"b"},"finish_reason":null}]}\n\n`, 2],
    [`data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null},{"index":1,"delta":{"content":""},"finish_reason":null}]}\n\n`, 1],
    [': keep-alive\n\n', 0],
  ];
  for (const [text, n] of cases) {
    const { m, out } = run(text, {}, 100_000);
    assert.equal(m.producedTokens(), n, text);
    assert.equal(out, text);
  }
});

test('running usage (continuous usage stats) is read from every chunk and removed when the client did not ask for it', () => {
  const text = chunk({ content: 'a' }, { usage: { prompt_tokens: 7, completion_tokens: 1, total_tokens: 8 } })
    + chunk({ content: 'b' }, { usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } });
  const { m, out } = run(text, { stripChunkUsage: true, runningUsage: true }, 100_000);
  assert.deepEqual(m.reported, { input: 7, output: 2, reasoning: 0 });
  assert.equal(m.producedTokens(), 2);
  assert.equal(m.final, false);
  assert.equal(out, text.replace(/"usage":\{[^}]*\}/g, '"usage":null'));
});

// llama.cpp's llama-server (build b10434), as it sends them: a completions stream's usage rides on its
// finish chunk; with n=2 each choice is a task of its own that reports its own usage.
const LLAMA_COMPLETION = [
  'data: {"choices":[{"text":" no","index":0,"logprobs":null,"finish_reason":null}],"created":1,"model":"m.gguf","object":"text_completion","id":"c"}\n\n',
  'data: {"choices":[{"text":" other","index":0,"logprobs":null,"finish_reason":null}],"created":1,"model":"m.gguf","object":"text_completion","id":"c"}\n\n',
  'data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":1,"model":"m.gguf","object":"text_completion","usage":{"completion_tokens":2,"prompt_tokens":5,"total_tokens":7},"id":"c"}\n\n',
  'data: [DONE]\n\n',
].join('');

test('llama.cpp: usage on a completions finish chunk is the exact usage, kept for a client that asked and removed for one that did not', () => {
  for (const cut of [1, 7, 100_000]) {
    const { m, out } = run(LLAMA_COMPLETION, {}, cut);
    assert.equal(out, LLAMA_COMPLETION);
    assert.deepEqual(m.usage(), usageOf({ inputTokens: 5, outputTokens: 2, basis: 'exact' }));
  }
  const { m, out } = run(LLAMA_COMPLETION, { stripUsageChunk: true }, 100_000);
  assert.equal(m.usage().basis, 'exact');
  assert.ok(!out.includes('"usage":{'), out);
  assert.equal(out.split('\n\n').length, LLAMA_COMPLETION.split('\n\n').length, 'no chunk dropped');
  // Cut before [DONE]: what was produced, not a final bill.
  const cutShort = run(LLAMA_COMPLETION.replace('data: [DONE]\n\n', ''), {}, 100_000).m;
  assert.equal(cutShort.usage().basis, 'partial');
});

test('llama.cpp: n=2 reports each choice\'s usage on its own; the stream\'s usage is their sum', () => {
  const u = (p, c) => `data: {"choices":[],"object":"chat.completion.chunk","usage":{"completion_tokens":${c},"prompt_tokens":${p},"total_tokens":${p + c}}}\n\n`;
  const text = chunk({ content: 'a' }) + chunk({ content: 'b' }) + u(23, 2)
    + `data: {"choices":[{"index":1,"delta":{"content":"c"},"finish_reason":null}]}\n\n` + u(23, 3) + 'data: [DONE]\n\n';
  const { m } = run(text, {}, 100_000);
  assert.deepEqual({ ...m.usage() }, usageOf({ inputTokens: 46, outputTokens: 5, basis: 'exact' }));
  // An upstream with running usage: the newest report replaces the last.
  assert.equal(run(text, { runningUsage: true }, 100_000).m.usage().outputTokens, 3);
});

test('llama.cpp prompt progress: a stream cut before its usage is billed the prompt llama.cpp counted; the progress chunks go only to a client that asked', () => {
  const progress = (index, total, processed) => `data: {"choices":[{"finish_reason":null,"index":${index},"delta":{"role":"assistant","content":null}}],"object":"chat.completion.chunk","prompt_progress":{"total":${total},"cache":0,"processed":${processed},"time_ms":0}}\n\n`;
  const body = progress(0, 35, 0) + progress(0, 35, 35) + chunk({ role: 'assistant', content: null }) + chunk({ content: 'a' }) + chunk({ content: 'b' });
  for (const cut of [1, 9, 100_000]) {
    // Cut before the usage: Tollgate's own estimate (7) would be below llama.cpp's 35.
    const { m, out } = run(body, { promptProgress: 'strip', promptTokens: () => 7 }, cut);
    assert.ok(!out.includes('prompt_progress'), out);
    assert.equal(out, chunk({ role: 'assistant', content: null }) + chunk({ content: 'a' }) + chunk({ content: 'b' }));
    assert.deepEqual({ ...m.usage() }, usageOf({ inputTokens: 35, outputTokens: 2, basis: 'partial' }));
  }
  // The client asked for return_progress itself: it gets the chunks; two tasks (n=2) each count their prompt.
  const two = body + progress(1, 35, 35);
  const kept = run(two, { promptProgress: 'keep', promptTokens: () => 7 }, 100_000);
  assert.equal(kept.out, two);
  assert.equal(kept.m.usage().inputTokens, 70);
  // Without the option a prompt_progress field is nobody's business: the estimate, and the chunks pass as they came.
  const off = run(body, { promptTokens: () => 7 }, 100_000);
  assert.equal(off.out, body);
  assert.equal(off.m.usage().inputTokens, 7);
});

test('llama.cpp: a stream of several prompts opens with `data: null`, which passes through and is not metered', () => {
  const text = 'data: null\n\n' + `data: {"choices":[{"text":" a","index":0,"logprobs":null,"finish_reason":"length"}],"object":"text_completion","usage":{"completion_tokens":1,"prompt_tokens":5,"total_tokens":6}}\n\n`
    + `data: {"choices":[{"text":" b","index":1,"logprobs":null,"finish_reason":"length"}],"object":"text_completion","usage":{"completion_tokens":1,"prompt_tokens":4,"total_tokens":5}}\n\n` + 'data: [DONE]\n\n';
  for (const cut of [1, 100_000]) {
    const { m, out } = run(text, {}, cut);
    assert.equal(out, text);
    assert.deepEqual({ ...m.usage() }, usageOf({ inputTokens: 9, outputTokens: 2, basis: 'exact' }));
  }
});

test('a buffered request asked as a stream: the whole reply is built from the chunks, every task\'s usage summed', () => {
  const ev = (o) => `data: ${JSON.stringify(o)}\n\n`;
  const head = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 7, model: '/m.gguf', system_fingerprint: 'b1' };
  const c = (index, delta, finish = null, extra = {}) => ev({ ...head, choices: [{ index, delta, finish_reason: finish, ...extra }] });
  const usage = (p, o) => ev({ ...head, choices: [], usage: { prompt_tokens: p, completion_tokens: o, total_tokens: p + o } });
  const chat = c(1, { role: 'assistant', content: null }) + c(1, { content: 'Hé' }) + c(0, { role: 'assistant', content: null })
    + c(0, { reasoning_content: 'hm' }) + c(0, { content: 'a' }, null, { logprobs: { content: [{ token: 'a', logprob: -1 }] } })
    + c(0, { tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"x"' } }] })
    + c(0, { tool_calls: [{ index: 0, function: { arguments: ':1}' } }] }, null, { logprobs: { content: [{ token: 'b', logprob: -2 }] } })
    + c(1, { content: 'llo' }) + c(1, {}, 'length') + usage(35, 2) + c(0, {}, 'tool_calls') + usage(35, 3) + 'data: [DONE]\n\n';
  for (const cut of [1, 5, 100_000]) {
    const m = new StreamJsonMeter({ model: 'tiny', promptTokens: () => 1, outputTokens: () => 1 });
    const bytes = Buffer.from(chat);
    for (let i = 0; i < bytes.length; i += cut) assert.equal(m.onData(bytes.subarray(i, i + cut)), '');
    const reply = JSON.parse(m.onEnd(true));
    assert.deepEqual(reply, {
      id: 'chatcmpl-1', object: 'chat.completion', created: 7, model: 'tiny', system_fingerprint: 'b1',
      choices: [
        { index: 0, message: { role: 'assistant', content: 'a', reasoning_content: 'hm', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"x":1}' } }] },
          logprobs: { content: [{ token: 'a', logprob: -1 }, { token: 'b', logprob: -2 }] }, finish_reason: 'tool_calls' },
        { index: 1, message: { role: 'assistant', content: 'Héllo' }, finish_reason: 'length' },
      ],
      usage: { prompt_tokens: 70, completion_tokens: 5, total_tokens: 75 },
    });
    assert.deepEqual({ ...m.usage() }, usageOf({ inputTokens: 70, outputTokens: 5, basis: 'exact' }));
  }
  // Cut before [DONE]: no reply (a 502), nothing billed.
  const cutShort = new StreamJsonMeter({ model: 'tiny', promptTokens: () => 1, outputTokens: () => 1 });
  cutShort.onData(Buffer.from(chat.replace('data: [DONE]\n\n', '')));
  assert.throws(() => cutShort.onEnd(true));
  assert.equal(cutShort.usage().basis, 'partial');
  assert.equal(cutShort.usage().inputTokens, 0);
});

test('whole unchanged events are forwarded as the very bytes that came in', () => {
  const m = new SseMeter({ stripUsageChunk: false, stripChunkUsage: false });
  const b = Buffer.from(chunk({ content: 'x' }) + chunk({ content: 'y' }));
  assert.equal(m.onData(b), b);
  const half = Buffer.from(chunk({ content: 'z' }));
  assert.equal(m.onData(half.subarray(0, 10)), '');
  assert.equal(m.onData(half.subarray(10)).toString(), half.toString());
});

test('a read that ends in part of a character is not forwarded as it came: the character is sent once, whole', () => {
  const m = new SseMeter({ stripUsageChunk: false, stripChunkUsage: false });
  const first = chunk({ content: 'a' });
  const e = Buffer.from('é');
  let out = m.onData(Buffer.concat([Buffer.from(first), e.subarray(0, 1)])).toString();
  out += m.onData(Buffer.concat([e.subarray(1), Buffer.from('\n\n')])).toString();
  assert.equal(out, `${first}é\n\n`);
});

test('the Responses meter splits on CRLF too and keeps characters cut between reads', () => {
  const ev = (type, body) => `event: ${type}\r\ndata: ${JSON.stringify({ type, ...body })}\r\n\r\n`;
  const text = ev('response.output_text.delta', { delta: 'é日' }) + ev('response.output_text.delta', { delta: 'b' })
    + ev('response.completed', { response: { usage: { input_tokens: 3, output_tokens: 2 } } });
  const m = new ResponsesSseMeter();
  const bytes = Buffer.from(text);
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) out += m.onData(bytes.subarray(i, i + 3));
  assert.equal(out, text);
  assert.deepEqual(m.reported, { input: 3, output: 2, reasoning: 0 });
  assert.ok(m.final && m.done);
});

// ---- the model's name: replies name Tollgate's id, not the upstream's ----------------------------------

const UP = 'google/gemma-3-27b-it';
const named = (model) => STREAM.split('\n\n').filter(Boolean)
  .map((e) => (e.startsWith('data: {') ? e.replace('{"id":"c1",', `{"id":"c1","model":${JSON.stringify(model)},`) : e))
  .map((e) => `${e}\n\n`).join('');

test('a stream that names the upstream\'s model is forwarded naming ours, every other byte the same, at every read size', () => {
  // Model text that looks like a model key stays as it was written.
  const upstream = named(UP).replace('Héllo', 'Héllo \\"model\\":\\"google/gemma-3-27b-it\\"');
  const ours = named('gemma-3-27b-it').replace('Héllo', 'Héllo \\"model\\":\\"google/gemma-3-27b-it\\"');
  assert.notEqual(upstream, ours);
  for (const cut of [1, 2, 3, 5, 7, 64, 100_000]) {
    for (const opts of [{}, { stripUsageChunk: true }]) {
      const { m, out } = run(upstream, { model: 'gemma-3-27b-it', ...opts }, cut);
      assert.equal(out, opts.stripUsageChunk ? ours.replace(/data: \{[^\n]*"choices":\[\],[^\n]*\n\n/, '') : ours, `cut ${cut}`);
      assert.equal(m.producedTokens(), 4, `cut ${cut}`);
      assert.deepEqual(m.reported, { input: 7, output: 4, reasoning: 0 });
    }
  }
  // Spaced JSON, CRLF, and a name with escapes are renamed in place too.
  const spaced = 'data: {"id": "c1", "model" : "a\\/b", "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": null}]}\r\n\r\n';
  assert.equal(run(spaced, { model: 'gemma' }, 3).out, spaced.replace('"a\\/b"', '"gemma"'));
  // Running usage the client did not ask for is removed from a chunk that is renamed as well.
  const cont = chunk({ content: 'a' }, { model: UP, usage: { prompt_tokens: 7, completion_tokens: 1, total_tokens: 8 } });
  assert.equal(JSON.parse(run(cont, { model: 'gemma', stripChunkUsage: true }, 100_000).out.slice(6)).model, 'gemma');
});

test('a renamed chunk keeps every other byte as it came, even bytes that are not UTF-8, at every read size', () => {
  // A host that cuts a character short (0xe6 0x97: the first two of 日's three bytes) or sends a stray byte
  // (0xff): a name put in as bytes leaves them be, where decoding the chunk to rename it turned each into U+FFFD.
  const event = (model) => Buffer.concat([Buffer.from(`data: {"id":"c1","model":"${model}","choices":[{"index":0,"delta":{"content":"a`),
    Buffer.from([0xe6, 0x97, 0x20, 0xff]), Buffer.from('b"},"finish_reason":null}]}\n\n')]);
  const upstream = Buffer.concat([event(UP), Buffer.from('data: [DONE]\n\n')]);
  const expected = Buffer.concat([event('gemma-3-27b-it'), Buffer.from('data: [DONE]\n\n')]);
  for (const cut of [1, 2, 3, 5, 7, 64, 100_000]) {
    const m = new SseMeter({ stripUsageChunk: false, stripChunkUsage: false, model: 'gemma-3-27b-it' });
    const out = [];
    for (let i = 0; i < upstream.length; i += cut) out.push(Buffer.from(m.onData(upstream.subarray(i, i + cut))));
    assert.deepEqual(Buffer.concat(out), expected, `cut ${cut}`);
    assert.equal(m.producedTokens(), 1);
    assert.ok(m.done);
  }
});

test('the common chunk is read in one pass as JSON reads it: escapes, nesting, key order and spacing', () => {
  // [the chunk's JSON, whether it carried output, the JSON forwarded with our model (null: as it came)]
  const cases = [
    // A string that ends in an escaped backslash closes there: the keys after it are keys.
    ['{"id":"a\\\\","model":"up","choices":[{"index":0,"delta":{"content":"x\\\\"},"finish_reason":null}]}', true, '{"id":"a\\\\","model":"ours","choices":[{"index":0,"delta":{"content":"x\\\\"},"finish_reason":null}]}'],
    // Escaped quotes and backslashes in text that looks like keys stay text.
    ['{"model":"up","choices":[{"index":0,"delta":{"content":"\\\\\\"model\\":\\"x\\", \\"usage\\":{}"},"finish_reason":null}]}', true, '{"model":"ours","choices":[{"index":0,"delta":{"content":"\\\\\\"model\\":\\"x\\", \\"usage\\":{}"},"finish_reason":null}]}'],
    // A model key inside a choice is not the chunk's: it is left alone, and the top-level one comes last.
    ['{"choices":[{"index":0,"delta":{"model":"inner","content":"y"},"finish_reason":null}],"model":"up"}', true, '{"choices":[{"index":0,"delta":{"model":"inner","content":"y"},"finish_reason":null}],"model":"ours"}'],
    // Spacing around colons; an empty and a null content are no output; the model already ours.
    ['{ "model" : "ours" , "choices" : [ { "index" : 0 , "delta" : { "content" : "" } , "finish_reason" : null } ] }', false, null],
    ['{"model":"up","choices":[{"index":0,"delta":{"content":null,"arguments":"{\\"a\\":1}"},"finish_reason":null}]}', true, '{"model":"ours","choices":[{"index":0,"delta":{"content":null,"arguments":"{\\"a\\":1}"},"finish_reason":null}]}'],
    // Two choices: parsed whole (each choice's output counted), renamed all the same.
    ['{"model":"up","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null},{"index":1,"delta":{"content":"b"},"finish_reason":null}]}', 2, '{"model":"ours","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null},{"index":1,"delta":{"content":"b"},"finish_reason":null}]}'],
  ];
  for (const [json, output, forwarded] of cases) {
    JSON.parse(json); // each case is JSON
    const event = `data: ${json}\n\n`;
    for (const cut of [1, 7, 100_000]) {
      const { m, out } = run(event, { model: 'ours' }, cut);
      assert.equal(out, forwarded === null ? event : `data: ${forwarded}\n\n`, `${json} (cut ${cut})`);
      assert.equal(m.producedTokens(), Number(output), `${json} (cut ${cut})`);
    }
  }
  // Text after the object on its line: not JSON, so not counted as output; it goes on as it came, but for our model.
  const odd = 'data: {"model":"up","choices":[{"index":0,"delta":{"content":"z"},"finish_reason":null}]} tail\n\n';
  const { m, out } = run(odd, { model: 'ours' }, 100_000);
  assert.equal(out, odd.replace('"up"', '"ours"'));
  assert.equal(m.producedTokens(), 0);
});

test('a stream that already names our model is forwarded as the very bytes that came in', () => {
  const m = new SseMeter({ stripUsageChunk: false, stripChunkUsage: false, model: 'sim-chat' });
  const b = Buffer.from(chunk({ content: 'x' }, { model: 'sim-chat' }) + chunk({ content: 'y' }, { model: 'sim-chat' }));
  assert.equal(m.onData(b), b);
});

test('a buffered reply names our model at its top level only, its other bytes kept', () => {
  const text = `{"id":"c1","object":"chat.completion","model":"${UP}","choices":[{"index":0,"message":{"role":"assistant","content":"the \\"model\\":\\"x\\""}}],`
    + '"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}';
  const m = new JsonMeter({ promptTokens: () => 0, outputTokens: () => 0, model: 'gemma-3-27b-it' });
  m.onData(Buffer.from(text));
  assert.equal(m.onEnd(true).toString(), text.replace(`"model":"${UP}"`, '"model":"gemma-3-27b-it"'));
  const same = new JsonMeter({ promptTokens: () => 0, outputTokens: () => 0, model: UP });
  const buf = Buffer.from(text);
  same.onData(buf);
  assert.equal(same.onEnd(true), buf);
});

test('passed-through Responses events name our model on the Response, and leave a tool\'s own model alone', () => {
  const ev = (type, body) => `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
  const resp = (status) => ({ id: 'resp_1', model: UP, status, tools: [{ type: 'image_generation', model: 'gpt-image-1' }] });
  const text = ev('response.created', { response: resp('in_progress') }) + ev('response.output_text.delta', { delta: '"model":"x"' })
    + ev('response.completed', { response: { ...resp('completed'), usage: { input_tokens: 3, output_tokens: 1 } } });
  for (const cut of [1, 4, 100_000]) {
    const m = new ResponsesSseMeter(() => 0, 'gemma-3-27b-it');
    const bytes = Buffer.from(text);
    let out = '';
    for (let i = 0; i < bytes.length; i += cut) out += m.onData(bytes.subarray(i, i + cut));
    assert.equal(out, text.replaceAll(`"model":"${UP}"`, '"model":"gemma-3-27b-it"'), `cut ${cut}`);
    assert.match(out, /"model":"gpt-image-1"/);
    assert.ok(m.final);
  }
});

// WS /beta/v1/text-to-speech/{voice_id}/multi-stream-input with a raw `ws` client: contexts with their own
// buffers and schedules on one socket, close_context, close_socket, the context limit, per-context inactivity.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { startGateway, assertInvariants, balanceNano } from './helpers/gateway.mjs';
import { connect as open } from './helpers/ws.mjs';
import { hasFfmpeg, oggPages, probeAudio } from './helpers/audio.mjs';

// One gateway for the file (each test has accounts of its own).
let gw = null;
const teardown = [];
before(async () => { gw = await startGateway({ after: (fn) => teardown.push(fn) }, { store: 'pglite' }); });
after(async () => { for (const fn of teardown.reverse()) await fn(); });

const VOICE = 'JBFqnCBsd6RMkjVDRZzb';
/** sim-tts: $15 per million characters = 15,000 nanodollars a character. */
const PER_CHAR = 15_000n;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function url(query) {
  return `${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${VOICE}/multi-stream-input?${query}`;
}

/** Opens a socket on `url(query)`; resolves once open (test/helpers/ws.mjs). */
const connect = (query, headers = {}) => open(url(query), headers);

const balance = (account) => balanceNano(gw, account);
const chars = (s) => BigInt([...s].length);
/** What a context's audio frames spelled, generation after generation (audio is relayed as it is made: a generation is one or more frames). */
const spelled = (frames, id) => frames.filter((f) => f.audio && f.contextId === id).map((f) => f.alignment?.chars.join('') ?? '').join('');
/** Frames' contexts in order, each run of one context's frames counted once. */
const runs = (frames) => frames.filter((f) => f.audio).map((f) => f.contextId).filter((c, i, all) => i === 0 || all[i - 1] !== c);
/** A context's final message: `cost` is what its generations were billed, in dollars (a JSON number). */
const finalOf = (contextId, nano) => ({ audio: null, isFinal: true, contextId, cost: Number(nano) / 1e9 });
const until = async (fn, ms = 20_000) => { const end = Date.now() + ms; while (!fn()) { if (Date.now() > end) throw new Error('timed out'); await sleep(10); } };

test('two contexts on one socket keep their own buffers and schedules; audio and finals name their context; billed per character generated', async () => {
  const { key, account } = await gw.account('1');
  const before = await balance(account);
  const s = await connect('output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key });
  // Context a generates at 50 characters, b only on flush (its schedule is longer than its text).
  s.send({ text: ' ', context_id: 'a', generation_config: { chunk_length_schedule: [50] } });
  s.send({ text: ' ', context_id: 'b', generation_config: { chunk_length_schedule: [500] } });
  const a1 = 'Context a speaks first, with a schedule of fifty. ';
  const b1 = 'Context b waits for its flush. ';
  const a2 = 'Then a is closed with this text never flushed ';
  s.send({ text: b1, context_id: 'b' });
  s.send({ text: a1, context_id: 'a' });
  await until(() => s.frames.some((f) => f.audio));
  assert.deepEqual(runs(s.frames), ['a'], 'a reached its schedule; b is still buffering');
  s.send({ text: a2, context_id: 'a' });
  s.send({ context_id: 'a', close_context: true });
  s.send({ context_id: 'b', flush: true });
  await until(() => s.frames.filter((f) => f.isFinal === true).length === 1 && spelled(s.frames, 'b') === b1);
  s.send({ close_socket: true });
  const { code } = await s.closed;
  assert.equal(code, 1000);
  const audio = s.frames.filter((f) => f.audio);
  assert.deepEqual([runs(s.frames), spelled(s.frames, 'a'), spelled(s.frames, 'b')], [['a', 'b'], a1, b1]);
  for (const f of audio) {
    const ms = (Buffer.from(f.audio, 'base64').length / 2 / 16_000) * 1000;
    if (f.alignment) assert.ok(Math.abs(f.alignment.charStartTimesMs.at(-1) + f.alignment.charsDurationsMs.at(-1) - ms) <= 2, 'the alignment spans the frame');
    assert.equal(f.isFinal, false);
  }
  const finals = s.frames.filter((f) => f.isFinal === true);
  assert.deepEqual(finals, [finalOf('a', chars(a1) * PER_CHAR), finalOf('b', chars(b1) * PER_CHAR)],
    'a final for a when it closed, for b when the socket closed, each with what its generations cost');
  // a's unflushed text was dropped at close_context: billed nothing.
  assert.equal(before - (await balance(account)), (chars(a1) + chars(b1)) * PER_CHAR);
  await assertInvariants(assert, gw, account);
});

test('close_socket generates what each context still buffers, then ends every context and closes with 1000', async () => {
  const { key, account } = await gw.account('1');
  const before = await balance(account);
  const s = await connect('output_format=ulaw_8000&model_id=sim-tts');
  // The key in the first frame; no context_id: the default context (contextId null).
  s.send({ text: ' ', xi_api_key: key });
  const d = 'The default context. ';
  const x = 'And a named one. ';
  s.send({ text: d });
  s.send({ text: x, context_id: 'x' });
  s.send({ close_socket: true });
  assert.equal((await s.closed).code, 1000);
  assert.deepEqual([runs(s.frames), spelled(s.frames, null), spelled(s.frames, 'x')], [[null, 'x'], d, x]);
  const ulaw = s.frames.filter((f) => f.audio && f.contextId === null).reduce((n, f) => n + Buffer.from(f.audio, 'base64').length, 0);
  assert.equal(ulaw, Number(chars(d)) * 60 * 8, 'G.711 at 8 kHz: one byte a sample, 60 ms a character');
  assert.deepEqual(s.frames.filter((f) => f.isFinal === true).map((f) => f.contextId), [null, 'x']);
  assert.equal(before - (await balance(account)), (chars(d) + chars(x)) * PER_CHAR);
  await assertInvariants(assert, gw, account);
});

test(`a sixth context open at once closes the socket with 1008 max_active_conversations; a closed context frees its place`, async () => {
  const { key, account } = await gw.account('1');
  const s = await connect('output_format=pcm_16000', { 'xi-api-key': key });
  for (const id of ['c1', 'c2', 'c3', 'c4', 'c5']) s.send({ text: ' ', context_id: id });
  s.send({ context_id: 'c1', close_context: true });
  s.send({ text: ' ', context_id: 'c6' });
  await until(() => s.frames.some((f) => f.isFinal));
  assert.equal(s.ws.readyState, WebSocket.OPEN, 'five open after c1 closed: c6 fits');
  s.send({ text: ' ', context_id: 'c7' });
  const { code, reason } = await s.closed;
  assert.equal(code, 1008);
  assert.equal(reason, 'max_active_conversations');
  assert.match(s.frames.at(-1).message, /Maximum simultaneous contexts per WebSocket connection exceeded \(5\)/);
  await assertInvariants(assert, gw, account);
});

test('a context without messages for inactivity_timeout is closed (its final sent, its text dropped) while a kept-alive one goes on', async () => {
  const { key, account } = await gw.account('1');
  const before = await balance(account);
  const s = await connect('output_format=pcm_16000&model_id=sim-tts&inactivity_timeout=2', { 'xi-api-key': key });
  s.send({ text: ' ', context_id: 'quiet' });
  s.send({ text: 'Never flushed. ', context_id: 'quiet' });
  s.send({ text: ' ', context_id: 'kept' });
  for (let i = 0; i < 7; i++) { await sleep(500); s.send({ text: '', context_id: 'kept' }); }
  assert.deepEqual(s.frames.filter((f) => f.isFinal).map((f) => f.contextId), ['quiet']);
  assert.equal(s.ws.readyState, WebSocket.OPEN, 'the socket stays open: kept had messages');
  const said = 'Still here. ';
  s.send({ text: said, context_id: 'kept', flush: true });
  await until(() => s.frames.some((f) => f.audio));
  assert.equal(s.frames.find((f) => f.audio).contextId, 'kept');
  // Nothing more: the socket itself closes after its inactivity_timeout.
  const { code, reason } = await s.closed;
  assert.equal(code, 1008);
  assert.match(reason, /inactivity_timeout/);
  assert.equal(before - (await balance(account)), chars(said) * PER_CHAR, 'the dropped text billed nothing');
  await assertInvariants(assert, gw, account);
});

test('malformed frames, a close_context for no open context, a bad schedule and changed voice settings get error messages; the session goes on', async () => {
  const { key, account } = await gw.account('1');
  const s = await connect('output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key });
  s.ws.send('{"text": "not json');
  s.send({ context_id: 'nobody', close_context: true });
  s.send({ text: ' ', context_id: 'bad', generation_config: { chunk_length_schedule: [5] } });
  s.send({ text: ' ', context_id: 'dict', pronunciation_dictionary_locators: [{ pronunciation_dictionary_id: 'p', version_id: 'v' }] });
  s.send({ text: 'Fine. ', context_id: 'ok', flush: true });
  s.send({ text: '', context_id: 'ok', voice_settings: { speed: 1.1 } });
  s.send({ close_socket: true });
  assert.equal((await s.closed).code, 1000);
  const errors = s.frames.filter((f) => f.error);
  assert.equal(errors.length, 5, JSON.stringify(errors));
  assert.match(errors[4].message, /voice_settings and generation_config apply from a context's first message only/);
  assert.equal(errors[4].contextId, 'ok');
  assert.match(errors[1].message, /no open context "nobody"/);
  assert.match(errors[2].message, /chunk_length_schedule/);
  assert.match(errors[3].message, /unsupported_parameter: pronunciation_dictionary_locators/);
  assert.deepEqual(s.frames.filter((f) => f.audio).map((f) => f.contextId), ['ok']);
  assert.deepEqual(s.frames.filter((f) => f.isFinal).map((f) => f.contextId), ['ok'], 'the contexts refused were never opened');
  await assertInvariants(assert, gw, account);
});

test('an unknown output_format closes the socket with 1008 and the reason', async () => {
  const { key } = await gw.account('1');
  const s = await connect('output_format=wav_99', { 'xi-api-key': key });
  const { code, reason } = await s.closed;
  assert.equal(code, 1008);
  assert.equal(reason, 'invalid output_format');
  assert.match(s.frames[0].message, /output_format "wav_99" is unknown/);
});

test('a socket dropped mid-generation while two contexts have text queued stops the generation under way, billed what it sent, and starts no other', async (t) => {
  // 100 ms between sim's 250 ms pieces of speech: each generation here takes most of a second.
  const slow = await startGateway(t, { store: 'pglite', upstreams: { sim: { sim: { token_delay_ms: 100 } } } });
  const { key, account } = await slow.account('1');
  const first = 'The first generation is heard. ';
  const second = 'Queued behind it in another context. ';
  const s = await new Promise((resolve, reject) => {
    const ws = new WebSocket(`${slow.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${VOICE}/multi-stream-input?output_format=pcm_16000&model_id=sim-tts`, { headers: { 'xi-api-key': key } });
    const frames = [];
    ws.on('message', (d) => frames.push(JSON.parse(d.toString())));
    const closed = new Promise((r) => ws.on('close', () => r()));
    ws.on('open', () => resolve({ ws, frames, closed }));
    ws.on('error', reject);
  });
  s.ws.send(JSON.stringify({ text: first, context_id: 'a', flush: true }));
  s.ws.send(JSON.stringify({ text: second, context_id: 'b', flush: true }));
  s.ws.send(JSON.stringify({ text: 'And a third one, never started. ', context_id: 'a', flush: true }));
  await until(() => s.frames.some((f) => f.audio));
  s.ws.terminate();
  await s.closed;
  // The client left while the first generation was being relayed: it stops there and is billed the
  // characters of the audio it sent (at least those the client heard); those queued behind it never start.
  const heard = BigInt(s.frames.filter((f) => f.audio).reduce((n, f) => n + f.alignment.chars.length, 0));
  let spent = 0n;
  for (let i = 0; i < 100 && spent === 0n; i++) {
    await sleep(50);
    spent = 1_000_000_000n - BigInt(Math.round((await slow.cli('account', 'show', account)).balance * 1e9));
  }
  await sleep(1500);
  spent = 1_000_000_000n - BigInt(Math.round((await slow.cli('account', 'show', account)).balance * 1e9));
  assert.ok(spent >= heard * PER_CHAR, `billed ${spent} nd, at least the ${heard} characters heard`);
  assert.ok(spent <= chars(first) * PER_CHAR, `billed ${spent} nd: at most the first generation, never the second or third`);
  await assertInvariants(assert, slow, account);
});

test('a whitespace-only frame in a context (the flush frame {"text":" ","flush":true}) adds no characters: billed the text to speak', async () => {
  const text = 'The flush frame carries one space that is not text to speak, so it is never billed as a character.';
  assert.equal([...text].length, 98);
  const { key, account } = await gw.account('1');
  const before = await balance(account);
  const s = await connect('output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key });
  s.send({ text: ' ', context_id: 'a' });
  s.send({ text, context_id: 'a' });
  s.send({ text: ' ', context_id: 'a', flush: true });
  s.send({ text: 'Hello', context_id: 'a' });
  s.send({ text: ' ', context_id: 'a' });
  s.send({ text: 'world.', context_id: 'a', flush: true });
  await until(() => spelled(s.frames, 'a') === `${text}Hello world.`);
  s.send({ close_socket: true });
  assert.equal((await s.closed).code, 1000);
  assert.equal(spelled(s.frames, 'a'), `${text}Hello world.`);
  assert.equal(before - (await balance(account)), (98n + 12n) * PER_CHAR, 'billed 98 + 12 characters, no flush space');
  await assertInvariants(assert, gw, account);
});

test('opus: each context is one Ogg Opus stream across its generations (one BOS page, one serial, growing granules), its own apart from the others', { skip: !hasFfmpeg && 'ffmpeg not installed' }, async () => {
  const { key, account } = await gw.account('1');
  const s = await connect('output_format=opus_48000_32&model_id=sim-tts', { 'xi-api-key': key });
  const texts = { a: ['Context a says this first. ', 'Then a says more. '], b: ['Context b has its own stream. ', 'And its own second part. '] };
  for (const id of ['a', 'b']) s.send({ text: ' ', context_id: id });
  for (let i = 0; i < 2; i++) for (const id of ['a', 'b']) s.send({ text: texts[id][i], context_id: id, flush: true });
  await until(() => ['a', 'b'].every((id) => spelled(s.frames, id) === texts[id].join('')));
  s.send({ close_socket: true });
  assert.equal((await s.closed).code, 1000);
  const serials = [];
  for (const id of ['a', 'b']) {
    const ogg = Buffer.concat(s.frames.filter((f) => f.audio && f.contextId === id).map((f) => Buffer.from(f.audio, 'base64')));
    const pages = oggPages(ogg);
    assert.equal(pages.filter((p) => p.flags & 2).length, 1, `${id}: one beginning-of-stream page`);
    assert.equal(new Set(pages.map((p) => p.serial)).size, 1, `${id}: one serial number`);
    serials.push(pages[0].serial);
    for (let i = 1; i < pages.length; i++) assert.ok(pages[i].granule >= pages[i - 1].granule, `${id}: granules only grow`);
    const sum = texts[id].reduce((n, t) => n + [...t].length * 0.06, 0);
    const p = probeAudio(ogg, 'ogg');
    for (const d of [p.duration, p.decodedSeconds]) assert.ok(d >= sum - 0.001 && d <= sum + 0.027 * 2 + 0.0066, `${id}: ${d} s for ${sum} s of speech`);
  }
  await assertInvariants(assert, gw, account);
});

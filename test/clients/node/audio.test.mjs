// The official `openai` npm client's audio calls against a real gateway on its embedded default: speech (whole and
// streamed), transcriptions and translations of it; each billed call moves the balance by exactly price × usage.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { startGateway } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

const PER_CHAR = 15_000n; // sim-tts: $15 per million characters
const PER_MS = 100n;      // sim-stt: $0.006 per minute
const TEXT = 'Speech from the Node client, heard again.';
const CHARS = BigInt([...TEXT].length);

async function fresh() {
  const acct = await gw.account('5');
  return { ...acct, client: gw.client(acct.key, '/v1') };
}

async function assertDebited(key, before, nano) {
  const after = await gw.settledBalance(key, before);
  assert.equal(before - after, nano);
}

/** A WAV's duration in whole milliseconds, rounded up (what Tollgate bills a transcription by). */
function wavMs(buf) {
  const rate = buf.readUInt32LE(24);
  const frames = buf.readUInt32LE(40) / 2;
  return BigInt(Math.ceil((frames * 1000) / rate));
}

test('audio.speech.create returns WAV of 60 ms a character and bills its characters', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const res = await client.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: TEXT, response_format: 'wav' });
  assert.equal(res.headers.get('content-type'), 'audio/wav');
  const wav = Buffer.from(await res.arrayBuffer());
  assert.equal(wavMs(wav), CHARS * 60n);
  await assertDebited(key, before, CHARS * PER_CHAR);
});

test('streamed speech (mp3) arrives in pieces and bills its characters', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  const res = await client.audio.speech.create({ model: 'gpt-4o-mini-tts', voice: 'coral', input: TEXT.repeat(3), response_format: 'mp3' });
  assert.equal(res.headers.get('content-type'), 'audio/mpeg');
  let reads = 0; let bytes = 0;
  for await (const piece of res.body) { reads++; bytes += piece.length; }
  assert.ok(bytes > 0);
  assert.ok(reads >= 1);
  await assertDebited(key, before, CHARS * 3n * PER_CHAR);
});

test('transcriptions and translations give the text back and bill the measured milliseconds', async () => {
  const { key, client } = await fresh();
  const wav = Buffer.from(await (await client.audio.speech.create({ model: 'tts-1-hd', voice: 'nova', input: TEXT, response_format: 'wav' })).arrayBuffer());
  let before = await gw.balance(key);
  const t = await client.audio.transcriptions.create({ model: 'whisper-1', file: await toFile(wav, 'speech.wav', { type: 'audio/wav' }) });
  assert.equal(t.text, TEXT);
  await assertDebited(key, before, wavMs(wav) * PER_MS);
  before = await gw.balance(key);
  const v = await client.audio.transcriptions.create({ model: 'gpt-4o-transcribe', file: await toFile(wav, 'speech.wav'), response_format: 'verbose_json', timestamp_granularities: ['word'] });
  assert.equal(v.words.at(-1).end, v.duration);
  await assertDebited(key, before, wavMs(wav) * PER_MS);
  before = await gw.balance(key);
  const tr = await client.audio.translations.create({ model: 'whisper-1', file: await toFile(wav, 'speech.wav') });
  assert.equal(tr.text, TEXT);
  await assertDebited(key, before, wavMs(wav) * PER_MS);
  const stream = await client.audio.transcriptions.create({ model: 'gpt-4o-mini-transcribe', file: await toFile(wav, 'speech.wav'), stream: true });
  const events = [];
  for await (const e of stream) events.push(e);
  assert.equal(events.at(-1).type, 'transcript.text.done');
  assert.equal(events.at(-1).text, TEXT);
});

test('refusals are typed errors and bill nothing', async () => {
  const { key, client } = await fresh();
  const before = await gw.balance(key);
  await assert.rejects(client.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: 'x', response_format: 'ogg' }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'invalid_value' && e.param === 'response_format');
  await assert.rejects(client.audio.speech.create({ model: 'tts-2', voice: 'alloy', input: 'x' }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  await assert.rejects(client.audio.transcriptions.create({ model: 'whisper-1', file: await toFile(Buffer.from('nope'.repeat(100)), 'a.wav') }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'invalid_audio');
  assert.equal(await gw.balance(key), before);
});

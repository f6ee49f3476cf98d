// The official `@elevenlabs/elevenlabs-js` client against a real gateway on its embedded default, base URL
// `<gateway>/beta`: voices (clone, read, list, search, sample audio, delete), tenant isolation, models,
// subscription, and the family's errors as the client's typed errors.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ElevenLabsClient, ElevenLabsError } from '@elevenlabs/elevenlabs-js';
import { startGateway } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

function el(key) {
  return new ElevenLabsClient({ apiKey: key, baseUrl: `${gw.url}/beta`, maxRetries: 0, timeoutInSeconds: 30 });
}

/** A fresh $5 account and an ElevenLabs client for its key. */
async function fresh(opts = {}) {
  const acct = await gw.account('5', opts);
  return { ...acct, client: el(acct.key) };
}

/** A small 16 kHz mono 16-bit WAV file, different for each seed. */
function wav(seed, samples = 1600) {
  const data = Buffer.alloc(samples * 2);
  for (let i = 0; i < samples; i++) data.writeInt16LE(((i * (seed + 7) * 37) % 16000) - 8000, i * 2);
  const h = Buffer.alloc(44);
  h.write('RIFF', 0); h.writeUInt32LE(36 + data.length, 4); h.write('WAVEfmt ', 8);
  h.writeUInt32LE(16, 16); h.writeUInt16LE(1, 20); h.writeUInt16LE(1, 22); h.writeUInt32LE(16000, 24);
  h.writeUInt32LE(32000, 28); h.writeUInt16LE(2, 32); h.writeUInt16LE(16, 34); h.write('data', 36); h.writeUInt32LE(data.length, 40);
  return Buffer.concat([h, data]);
}

function sample(seed, name = `s${seed}.wav`) {
  return new File([wav(seed)], name, { type: 'audio/wav' });
}

async function bytes(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(Buffer.from(c));
  return Buffer.concat(chunks);
}

async function rejects404(promise, status) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof ElevenLabsError, String(e));
    assert.equal(e.statusCode, 404);
    assert.equal(e.body.detail.status, status);
    assert.equal(e.body.error.code, status);
    return true;
  });
}

test('a voice is cloned, read, listed, searched, its sample audio fetched, a sample and the voice deleted', async () => {
  const { client } = await fresh();
  const { voiceId, requiresVerification } = await client.voices.ivc.create({
    name: 'Storyteller', description: 'warm', labels: { accent: 'irish' }, files: [sample(1, 'one.wav'), sample(2, 'two.wav')],
  });
  assert.equal(requiresVerification, false);
  const voice = await client.voices.get(voiceId);
  assert.equal(voice.name, 'Storyteller');
  assert.equal(voice.category, 'cloned');
  assert.deepEqual(voice.labels, { accent: 'irish' });
  assert.deepEqual(voice.samples.map((s) => s.fileName), ['one.wav', 'two.wav']);
  assert.ok((await bytes(await client.voices.samples.audio.get(voiceId, voice.samples[0].sampleId))).equals(wav(1)));

  assert.ok((await client.voices.getAll()).voices.some((v) => v.voiceId === voiceId));
  const found = await client.voices.search({ search: 'story', pageSize: 10 });
  assert.deepEqual(found.voices.map((v) => v.voiceId), [voiceId]);
  assert.equal(found.hasMore, false);
  assert.equal(found.totalCount, 1);

  assert.equal((await client.samples.delete(voiceId, voice.samples[0].sampleId)).status, 'ok');
  assert.deepEqual((await client.voices.get(voiceId)).samples.map((s) => s.sampleId), [voice.samples[1].sampleId]);
  assert.equal((await client.voices.delete(voiceId)).status, 'ok');
  await rejects404(client.voices.get(voiceId), 'voice_not_found');
});

test("another account's key gets 404 on a voice and its sample for every verb", async () => {
  const a = await fresh();
  const b = await fresh();
  const { voiceId } = await a.client.voices.ivc.create({ name: 'Private', files: [sample(3)] });
  const sampleId = (await a.client.voices.get(voiceId)).samples[0].sampleId;
  await rejects404(b.client.voices.get(voiceId), 'voice_not_found');
  await rejects404(b.client.voices.delete(voiceId), 'voice_not_found');
  await rejects404(b.client.samples.delete(voiceId, sampleId), 'voice_not_found');
  await rejects404(b.client.voices.samples.audio.get(voiceId, sampleId).then(bytes), 'voice_not_found');
  assert.ok(!(await b.client.voices.getAll()).voices.some((v) => v.voiceId === voiceId));
  assert.ok(!(await b.client.voices.search()).voices.some((v) => v.voiceId === voiceId));
  assert.equal((await a.client.voices.get(voiceId)).samples.length, 1, "the owner's voice is untouched");
});

test('models are a bare array of the speech models; the subscription is mapped from the balance', async () => {
  const { client } = await fresh();
  const models = await client.models.list();
  assert.ok(Array.isArray(models));
  assert.ok(models.some((m) => m.modelId === 'sim-tts-clone' && m.canDoTextToSpeech === true));
  const sub = await client.user.subscription.get();
  assert.equal(sub.status, 'active');
  assert.equal(sub.characterCount, 0);
  // $5 at sim-tts-clone's $30 per 1M characters.
  assert.equal(sub.characterLimit, Math.floor(5_000_000 / 30));
  assert.equal(sub.voiceSlotsUsed, 0);
  assert.equal(sub.canUseInstantVoiceCloning, true);
});

test('a bad key and a key without the voice scope are typed errors carrying both envelopes', async () => {
  await assert.rejects(el(`svc_live_${'y'.repeat(40)}`).voices.getAll(), (e) => {
    assert.equal(e.statusCode, 401);
    assert.equal(e.body.detail.status, 'invalid_api_key');
    assert.deepEqual(Object.keys(e.body.error).sort(), ['code', 'message', 'param', 'type']);
    return true;
  });
  const { client } = await fresh({ scopes: 'llm' });
  await assert.rejects(client.models.list(), (e) => e.statusCode === 403 && e.body.detail.status === 'insufficient_scope');
});

const GEORGE = 'JBFqnCBsd6RMkjVDRZzb'; // a premade voice (docs/elevenlabs.md, premade voices)

async function assertDebited(key, before, nano) {
  const after = await gw.settledBalance(key, before);
  assert.equal(before - after, nano, `balance moved by ${before - after} nanodollars; price × usage is ${nano}`);
}

test('text to speech through the client: convert and stream in PCM and μ-law, with timestamps, each billed by characters', async () => {
  const { client, key } = await fresh();
  const text = 'Hello from node.';
  for (const [format, rate, width] of [['pcm_24000', 24000, 2], ['pcm_16000', 16000, 2], ['ulaw_8000', 8000, 1]]) {
    for (const call of [client.textToSpeech.convert.bind(client.textToSpeech), client.textToSpeech.stream.bind(client.textToSpeech)]) {
      const before = await gw.balance(key);
      const audio = await bytes(await call(GEORGE, { text, modelId: 'eleven_multilingual_v2', outputFormat: format }));
      assert.equal(audio.length, Math.round(text.length * 0.06 * rate) * width);
      await assertDebited(key, before, BigInt(text.length) * 15_000n);
    }
  }
  const before = await gw.balance(key);
  const ts = await client.textToSpeech.convertWithTimestamps(GEORGE, { text, outputFormat: 'pcm_24000' });
  assert.equal(Buffer.from(ts.audioBase64, 'base64').length, Math.round(text.length * 0.06 * 24000) * 2);
  assert.deepEqual(ts.alignment.characters, [...text]);
  assert.ok(Math.abs(ts.alignment.characterEndTimesSeconds.at(-1) - text.length * 0.06) < 1e-9);
  await assertDebited(key, before, BigInt(text.length) * 15_000n);
});

test('speech to speech through the client is billed by the input seconds', async () => {
  const { client, key } = await fresh();
  const before = await gw.balance(key);
  const input = new File([wav(3, 16000)], 'in.wav', { type: 'audio/wav' }); // one second at 16 kHz
  const audio = await bytes(await client.speechToSpeech.convert(GEORGE, { audio: input, modelId: 'eleven_english_sts_v2', outputFormat: 'pcm_24000' }));
  assert.equal(audio.length, 24000 * 2, 'one second of 24 kHz PCM back');
  // 1,000 ms at $0.18 per minute.
  await assertDebited(key, before, 3_000_000n);
});

test('speech to text through the client gives back what text to speech said, billed by the measured minutes', async () => {
  const { client, key } = await fresh();
  const text = 'Node round trip.';
  const pcm = await bytes(await client.textToSpeech.convert(GEORGE, { text, outputFormat: 'pcm_24000' }));
  const h = Buffer.alloc(44);
  h.write('RIFF', 0); h.writeUInt32LE(36 + pcm.length, 4); h.write('WAVEfmt ', 8);
  h.writeUInt32LE(16, 16); h.writeUInt16LE(1, 20); h.writeUInt16LE(1, 22); h.writeUInt32LE(24000, 24);
  h.writeUInt32LE(48000, 28); h.writeUInt16LE(2, 32); h.writeUInt16LE(16, 34); h.write('data', 36); h.writeUInt32LE(pcm.length, 40);
  const before = await gw.balance(key);
  const result = await client.speechToText.convert({ modelId: 'scribe_v1', file: new File([Buffer.concat([h, pcm])], 'speech.wav', { type: 'audio/wav' }) });
  assert.equal(result.text, text);
  assert.ok(result.words.filter((w) => w.type === 'word').every((w) => typeof w.start === 'number' && w.end >= w.start));
  const ms = BigInt(Math.ceil((pcm.length * 1000) / 48000));
  await assertDebited(key, before, (ms * 6_000_000n + 59_999n) / 60_000n);
});

// The beta family's speech against sim: text to speech (formats, timestamps, headers), speech to speech; each billed exactly, refusals billed nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseBuffer } from 'music-metadata';
import { startGateway, assertInvariants, dollarsToNano } from './helpers/gateway.mjs';
import { wav } from './helpers/wav.mjs';

const GEORGE = 'JBFqnCBsd6RMkjVDRZzb'; // a premade voice (docs/elevenlabs.md, premade voices)
const PER_CHAR_ND = 15_000n; // sim-tts: $15 per 1M characters
const CLONE_PER_CHAR_ND = 30_000n; // sim-tts-clone: $30 per 1M characters
const STS_PER_MIN_ND = 180_000_000n; // sim-sts: $0.18 per minute

function xi(key, extra = {}) { return { 'xi-api-key': key, ...extra }; }
const json = { 'content-type': 'application/json' };

/** The balance in nanodollars once it has moved from `before` (a stream settles just after its last byte). */
async function settled(gw, key, before) {
  for (let i = 0; i < 100; i++) {
    const b = dollarsToNano(String((await (await gw.fetch('/svc/v1/key', { headers: xi(key) })).json()).balance));
    if (b !== before) return b;
    await new Promise((r) => setTimeout(r, 50));
  }
  return before;
}

async function nowNano(gw, key) {
  return dollarsToNano(String((await (await gw.fetch('/svc/v1/key', { headers: xi(key) })).json()).balance));
}

test('text to speech makes every PCM and G.711 format at its rate, with request-id and character-cost, billed by characters', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const { key, account } = await gw.account('5');
  const text = 'Hello from the gateway.';
  const chars = BigInt([...text].length);
  // sim speaks 60 ms a character.
  const cases = [['pcm_24000', 24000, 2], ['pcm_16000', 16000, 2], ['pcm_22050', 22050, 2], ['pcm_44100', 44100, 2], ['ulaw_8000', 8000, 1], ['alaw_8000', 8000, 1]];
  for (const [format, rate, width] of cases) {
    for (const suffix of ['', '/stream']) {
      const before = await nowNano(gw, key);
      const res = await gw.fetch(`/beta/v1/text-to-speech/${GEORGE}${suffix}?output_format=${format}`, { method: 'POST', headers: xi(key, json), body: JSON.stringify({ text, model_id: 'eleven_multilingual_v2' }) });
      assert.equal(res.status, 200, `${format}${suffix}: ${res.status}`);
      assert.equal(res.headers.get('character-cost'), String(chars));
      assert.ok(res.headers.get('request-id'));
      const audio = Buffer.from(await res.arrayBuffer());
      assert.equal(audio.length, Math.round(Number(chars) * 0.06 * rate) * width, `${format}${suffix}: ${audio.length} bytes`);
      assert.equal(before - await settled(gw, key, before), chars * PER_CHAR_ND, 'billed exactly characters × price');
    }
  }
  await assertInvariants(assert, gw, account);
});

test('the default output format is MP3 at 44.1 kHz that decodes to the length of the speech; every mp3 rate is made', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const { key, account } = await gw.account('5');
  const text = 'An mp3, please.';
  for (const format of [null, 'mp3_22050_32', 'mp3_44100_192']) {
    const before = await nowNano(gw, key);
    const res = await gw.fetch(`/beta/v1/text-to-speech/${GEORGE}/stream${format ? `?output_format=${format}` : ''}`, { method: 'POST', headers: xi(key, json), body: JSON.stringify({ text }) });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'audio/mpeg');
    const meta = await parseBuffer(Buffer.from(await res.arrayBuffer()), { mimeType: 'audio/mpeg' }, { duration: true });
    assert.match(String(meta.format.codec), /MPEG/);
    assert.equal(meta.format.sampleRate, format === 'mp3_22050_32' ? 22050 : 44100);
    // LAME pads a frame or two: the MP3 is the speech's length within 0.1 s.
    assert.ok(Math.abs(meta.format.duration - text.length * 0.06) < 0.1, `${format}: ${meta.format.duration} s`);
    assert.equal(before - await settled(gw, key, before), BigInt(text.length) * PER_CHAR_ND);
  }
  await assertInvariants(assert, gw, account);
});

test('with-timestamps gives the audio and an alignment that ends with it; the stream gives lines, the last with the alignment', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const { key, account } = await gw.account('5');
  const text = 'Tick tock.';
  const before = await nowNano(gw, key);
  const res = await gw.fetch(`/beta/v1/text-to-speech/${GEORGE}/with-timestamps?output_format=pcm_16000`, { method: 'POST', headers: xi(key, json), body: JSON.stringify({ text }) });
  assert.equal(res.status, 200);
  const body = await res.json();
  const audio = Buffer.from(body.audio_base64, 'base64');
  assert.equal(audio.length, 10 * 0.06 * 16000 * 2);
  assert.deepEqual(body.alignment.characters, [...text]);
  assert.equal(body.alignment.character_start_times_seconds[0], 0);
  assert.equal(body.alignment.character_end_times_seconds.at(-1), 0.6, 'the last character ends with the audio');
  assert.equal(before - await settled(gw, key, before), 10n * PER_CHAR_ND);

  const before2 = await nowNano(gw, key);
  const s = await gw.fetch(`/beta/v1/text-to-speech/${GEORGE}/stream/with-timestamps?output_format=pcm_24000`, { method: 'POST', headers: xi(key, json), body: JSON.stringify({ text }) });
  assert.equal(s.status, 200);
  const lines = (await s.text()).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const total = lines.reduce((n, l) => n + Buffer.from(l.audio_base64, 'base64').length, 0);
  assert.equal(total, 10 * 0.06 * 24000 * 2);
  assert.deepEqual(lines.at(-1).alignment.characters, [...text]);
  assert.equal(before2 - await settled(gw, key, before2), 10n * PER_CHAR_ND);
  await assertInvariants(assert, gw, account);
});

test('a cloned voice speaks with the clone model and its price; unknown model_id is 404', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const { key, account } = await gw.account('5');
  const f = new FormData();
  f.append('name', 'Me');
  f.append('files', new Blob([wav(0.5)], { type: 'audio/wav' }), 'me.wav');
  const { voice_id: id } = await (await gw.fetch('/beta/v1/voices/add', { method: 'POST', headers: xi(key), body: f })).json();
  const before = await nowNano(gw, key);
  const res = await gw.fetch(`/beta/v1/text-to-speech/${id}?output_format=pcm_24000`, { method: 'POST', headers: xi(key, json), body: JSON.stringify({ text: 'Mine.' }) });
  assert.equal(res.status, 200);
  assert.equal((await res.arrayBuffer()).byteLength, 5 * 0.06 * 24000 * 2);
  assert.equal(before - await settled(gw, key, before), 5n * CLONE_PER_CHAR_ND);

  const other = await gw.account('5');
  const stolen = await gw.fetch(`/beta/v1/text-to-speech/${id}?output_format=pcm_24000`, { method: 'POST', headers: xi(other.key, json), body: JSON.stringify({ text: 'Yours?' }) });
  assert.equal(stolen.status, 404, "another account cannot speak with this account's voice");

  const nomodel = await gw.fetch(`/beta/v1/text-to-speech/${GEORGE}?output_format=pcm_24000`, { method: 'POST', headers: xi(key, json), body: JSON.stringify({ text: 'Hi', model_id: 'eleven_nope' }) });
  assert.equal(nomodel.status, 404);
  assert.equal((await nomodel.json()).detail.status, 'model_not_found');
  assert.equal(await nowNano(gw, key), before - 5n * CLONE_PER_CHAR_ND, 'refusals billed nothing');
  await assertInvariants(assert, gw, account);
});

test('opus_48000_* formats are real Ogg Opus of the speech\'s duration at their bit rate, billed by characters', async (t) => {
  const gw = await startGateway(t);
  const { key, account } = await gw.account('5');
  const text = 'The gate is open, and the toll is paid.'; // 39 characters: 2.34 s of sim speech
  const sizes = [];
  for (const kbps of [32, 64, 96, 128, 192]) {
    const before = await nowNano(gw, key);
    const res = await gw.fetch(`/beta/v1/text-to-speech/${GEORGE}/stream?output_format=opus_48000_${kbps}`, { method: 'POST', headers: xi(key, json), body: JSON.stringify({ text }) });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'audio/ogg');
    const body = Buffer.from(await res.arrayBuffer());
    const m = await parseBuffer(body, { mimeType: 'audio/ogg' });
    assert.deepEqual([m.format.container, m.format.codec], ['Ogg', 'Opus']);
    assert.ok(Math.abs(m.format.duration - 2.34) < 0.001, `${kbps}: ${m.format.duration} s`);
    sizes.push(body.length);
    assert.equal(before - await settled(gw, key, before), 39n * PER_CHAR_ND);
  }
  // more bits a second, more bytes: the format's bit rate reaches the encoder (sim's tones are not silence)
  for (let i = 1; i < sizes.length; i++) assert.ok(sizes[i] > sizes[i - 1] * 1.2, `sizes ${sizes}`);
  assert.ok(sizes[0] > 2.34 * 32_000 / 8 * 0.5, `32 kbit/s carries sound: ${sizes[0]} bytes`);
  await assertInvariants(assert, gw, account);
});

test('speech to speech converts to a premade or cloned voice at the input length, billed by input seconds; bad audio bills nothing', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const { key, account } = await gw.account('5');
  for (const suffix of ['', '/stream']) {
    const f = new FormData();
    f.append('audio', new Blob([wav(1.25)], { type: 'audio/wav' }), 'in.wav');
    f.append('model_id', 'eleven_multilingual_sts_v2');
    const before = await nowNano(gw, key);
    const res = await gw.fetch(`/beta/v1/speech-to-speech/${GEORGE}${suffix}?output_format=pcm_24000`, { method: 'POST', headers: xi(key), body: f });
    assert.equal(res.status, 200, `${suffix}: ${res.status}`);
    assert.equal((await res.arrayBuffer()).byteLength, 1.25 * 24000 * 2);
    // 1,250 ms at $0.18 per minute.
    assert.equal(before - await settled(gw, key, before), (1250n * STS_PER_MIN_ND + 59_999n) / 60_000n);
  }
  const bad = new FormData();
  bad.append('audio', new Blob([Buffer.from('this is no audio file')]), 'x.wav');
  const before = await nowNano(gw, key);
  const res = await gw.fetch(`/beta/v1/speech-to-speech/${GEORGE}?output_format=pcm_24000`, { method: 'POST', headers: xi(key), body: bad });
  assert.equal(res.status, 400);
  assert.equal((await res.json()).detail.status, 'invalid_audio');
  const none = new FormData();
  none.append('model_id', 'eleven_english_sts_v2');
  assert.equal((await gw.fetch(`/beta/v1/speech-to-speech/${GEORGE}`, { method: 'POST', headers: xi(key), body: none })).status, 422);
  assert.equal(await nowNano(gw, key), before, 'refusals billed nothing');
  await assertInvariants(assert, gw, account);
});

test('speech to text gives back what text to speech said, words timed within the audio, billed by the measured minutes', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const { key, account } = await gw.account('5');
  const text = 'Round trip works.';
  const pcm = Buffer.from(await (await gw.fetch(`/beta/v1/text-to-speech/${GEORGE}?output_format=pcm_24000`, { method: 'POST', headers: xi(key, json), body: JSON.stringify({ text }) })).arrayBuffer());
  const h = Buffer.alloc(44);
  h.write('RIFF', 0); h.writeUInt32LE(36 + pcm.length, 4); h.write('WAVEfmt ', 8);
  h.writeUInt32LE(16, 16); h.writeUInt16LE(1, 20); h.writeUInt16LE(1, 22); h.writeUInt32LE(24000, 24);
  h.writeUInt32LE(48000, 28); h.writeUInt16LE(2, 32); h.writeUInt16LE(16, 34); h.write('data', 36); h.writeUInt32LE(pcm.length, 40);
  const seconds = pcm.length / 48000;
  const f = new FormData();
  f.append('model_id', 'scribe_v1');
  f.append('file', new Blob([Buffer.concat([h, pcm])], { type: 'audio/wav' }), 'speech.wav');
  const before = await nowNano(gw, key);
  const res = await gw.fetch('/beta/v1/speech-to-text', { method: 'POST', headers: xi(key), body: f });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  assert.equal(body.text, text);
  const words = body.words.filter((w) => w.type === 'word');
  assert.deepEqual(words.map((w) => w.text), ['Round', 'trip', 'works'], 'the words of the upstream (without punctuation, as Whisper gives them)');
  assert.ok(words.every((w, i) => w.start <= w.end && w.end <= seconds + 1e-6 && (i === 0 || w.start >= words[i - 1].end)));
  assert.ok(body.words.some((w) => w.type === 'spacing'));
  // sim-stt: $0.006 per minute, the duration Tollgate measured (ms, rounded up).
  const ms = BigInt(Math.ceil(seconds * 1000));
  assert.equal(before - await settled(gw, key, before), (ms * 6_000_000n + 59_999n) / 60_000n);

  const diarize = new FormData();
  diarize.append('model_id', 'scribe_v1');
  diarize.append('diarize', 'true');
  diarize.append('file', new Blob([Buffer.concat([h, pcm])], { type: 'audio/wav' }), 'speech.wav');
  const refused = await gw.fetch('/beta/v1/speech-to-text', { method: 'POST', headers: xi(key), body: diarize });
  assert.equal(refused.status, 422);
  assert.equal((await refused.json()).error.code, 'unsupported_parameter');
  await assertInvariants(assert, gw, account);
});

test('a synthesis stream the client drops after audio arrived is billed for its whole text, and no hold is left', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const { key, account } = await gw.account('5');
  const text = 'A long sentence that takes many slow pieces of audio to speak, so the client can leave halfway through it.';
  const before = await nowNano(gw, key);
  const ac = new AbortController();
  const res = await gw.fetch(`/beta/v1/text-to-speech/${GEORGE}/stream?output_format=pcm_24000`, {
    method: 'POST', headers: xi(key, { ...json, 'x-sim-token-delay-ms': '300' }), body: JSON.stringify({ text }), signal: ac.signal,
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const first = await reader.read();
  assert.ok(first.value && first.value.length > 0, 'audio arrived');
  ac.abort();
  await reader.cancel().catch(() => undefined);
  // The whole text: never more than the request, never less than what was heard.
  assert.equal(before - await settled(gw, key, before), BigInt([...text].length) * PER_CHAR_ND);
  await assertInvariants(assert, gw, account);
});

// /alpha/v1/audio/*: speech in every format, transcription and translation of it, each billed exactly its priced usage;
// refusals bill nothing; the dropped-stream rule.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseBuffer } from 'music-metadata';
import { startGateway, assertInvariants, bearer, balanceNano } from './helpers/gateway.mjs';

const OPTS = { store: 'pglite' };
/** sim-tts: $15 per million characters; sim-stt: $0.006 per minute = 100 nanodollars a millisecond. */
const PER_CHAR = 15_000n;
const PER_MS = 100n;

/** The balance once `spent` has been debited (debits commit just after the reply); fails if it moves by anything else. */
async function expectSpent(gw, account, before, spent) {
  let now = await balanceNano(gw, account);
  for (let i = 0; i < 60 && before - now !== spent; i++) { await new Promise((r) => setTimeout(r, 50)); now = await balanceNano(gw, account); }
  assert.equal(before - now, spent);
}

function speech(gw, key, body, headers = {}) {
  return gw.fetch('/alpha/v1/audio/speech', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'tts-1', voice: 'alloy', ...body }) });
}

function upload(gw, key, path, file, name, fields = {}) {
  const form = new FormData();
  form.append('file', new Blob([file]), name);
  for (const [k, v] of Object.entries({ model: 'whisper-1', ...fields })) for (const x of [v].flat()) form.append(k, x);
  return gw.fetch(path, { method: 'POST', headers: { authorization: bearer(key).authorization }, body: form });
}

const TEXT = 'Tollgate speaks, then hears itself.';

/** The ADTS frames of an AAC file (after its ID3v2 tag): each holds 1024 samples. */
function adtsFrames(buf) {
  let p = buf.toString('latin1', 0, 3) === 'ID3' ? 10 + (((buf[6] & 0x7f) << 21) | ((buf[7] & 0x7f) << 14) | ((buf[8] & 0x7f) << 7) | (buf[9] & 0x7f)) : 0;
  let n = 0;
  for (; p + 7 <= buf.length && buf[p] === 0xff && (buf[p + 1] & 0xf0) === 0xf0; n++) p += ((buf[p + 3] & 3) << 11) | (buf[p + 4] << 3) | (buf[p + 5] >> 5);
  return n;
}
const EXT = { mp3: 'mp3', opus: 'ogg', aac: 'aac', flac: 'flac', wav: 'wav' };

test('speech in every format has its content type and decodes; transcribing it gives the text back; each call billed exactly', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('10');
  const types = { mp3: 'audio/mpeg', opus: 'audio/ogg', aac: 'audio/aac', flac: 'audio/flac', wav: 'audio/wav', pcm: 'audio/pcm' };
  const chars = BigInt([...TEXT].length);
  for (const fmt of Object.keys(types)) {
    let before = await balanceNano(gw, account);
    const r = await speech(gw, key, { input: TEXT, response_format: fmt });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-type'), types[fmt]);
    const audio = Buffer.from(await r.arrayBuffer());
    await expectSpent(gw, account, before, chars * PER_CHAR);
    if (fmt === 'pcm') { assert.equal(audio.length, [...TEXT].length * 1440 * 2); continue; }
    const m = await parseBuffer(audio, { size: audio.length }, { duration: true });
    assert.ok(m.format.duration > 0);
    before = await balanceNano(gw, account);
    const tr = await upload(gw, key, '/alpha/v1/audio/transcriptions', audio, `speech.${EXT[fmt]}`);
    assert.equal(tr.status, 200, await tr.clone().text());
    assert.equal((await tr.json()).text, TEXT, fmt);
    // billed by the frames in the file, each decoded whole, in milliseconds rounded up (never a header's total):
    // MP3 576-sample frames at 24 kHz holding LAME's 1,105 priming samples and the speech; Opus 20 ms packets
    // (960 samples at 48 kHz) holding the 312-sample pre-skip and the speech; ADTS 1024-sample frames (sim's aac is ffmpeg's, its first frame the encoder's priming); FLAC and WAV the samples
    const n = [...TEXT].length * 1440;
    const secs = { mp3: Math.ceil((n + 1105) / 576) * 576 / 24_000, opus: Math.ceil((2 * n + 312) / 960) * 960 / 48_000,
      aac: adtsFrames(audio) * 1024 / 24_000, flac: n / 24_000, wav: n / 24_000 }[fmt];
    await expectSpent(gw, account, before, BigInt(Math.ceil(secs * 1000)) * PER_MS);
  }
  await assertInvariants(assert, gw, account);
});

test('under /v1 too; translations, verbose_json, text and SSE formats pass through; streamed speech as SSE events', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('10');
  const wav = Buffer.from(await (await speech(gw, key, { input: TEXT, response_format: 'wav' })).arrayBuffer());
  const v = await (await upload(gw, key, '/v1/audio/translations', wav, 'a.wav', { response_format: 'verbose_json' })).json();
  assert.equal(v.task, 'translate');
  assert.equal(v.text, TEXT);
  assert.equal(v.duration, [...TEXT].length * 0.06);
  const w = await (await upload(gw, key, '/v1/audio/transcriptions', wav, 'a.wav', { response_format: 'verbose_json', 'timestamp_granularities[]': ['word'] })).json();
  assert.equal(w.words.at(-1).end, v.duration);
  const text = await upload(gw, key, '/v1/audio/transcriptions', wav, 'a.wav', { response_format: 'text' });
  assert.equal(await text.text(), `${TEXT}\n`);
  const sse = await upload(gw, key, '/v1/audio/transcriptions', wav, 'a.wav', { stream: 'true' });
  assert.equal(sse.headers.get('content-type'), 'text/event-stream');
  const events = (await sse.text()).trim().split('\n\n').map((e) => JSON.parse(e.slice(6)));
  assert.equal(events.at(-1).type, 'transcript.text.done');
  assert.equal(events.at(-1).text, TEXT);
  const s = await speech(gw, key, { input: TEXT, response_format: 'pcm', stream_format: 'sse' });
  assert.equal(s.headers.get('content-type'), 'text/event-stream');
  const se = (await s.text()).trim().split('\n\n').map((e) => JSON.parse(e.slice(6)));
  assert.equal(se.at(-1).type, 'speech.audio.done');
  const pcm = Buffer.concat(se.filter((e) => e.type === 'speech.audio.delta').map((e) => Buffer.from(e.audio, 'base64')));
  assert.equal(pcm.length, [...TEXT].length * 1440 * 2);
  await assertInvariants(assert, gw, account);
});

test('refusals: enumerations, unknown model (nearest named), voice, unreadable audio, malformed multipart, 413, scope — nothing billed', async (t) => {
  const gw = await startGateway(t, { ...OPTS, limits: { route_upload_bytes: { 'audio.translations': 4096 } } });
  const { key, account } = await gw.account('10');
  const before = await balanceNano(gw, account);
  const err = async (r, status, code, param) => {
    const b = await r.json();
    assert.equal(r.status, status, JSON.stringify(b));
    assert.equal(b.error.code, code);
    if (param !== undefined) assert.equal(b.error.param, param);
    return b.error;
  };
  await err(await speech(gw, key, { input: 'x', response_format: 'ogg' }), 400, 'invalid_value', 'response_format');
  await err(await speech(gw, key, { input: 'x', stream_format: 'chunks' }), 400, 'invalid_value', 'stream_format');
  await err(await speech(gw, key, { input: 'x', voice: 'nobody' }), 400, 'invalid_value', 'voice');
  const nf = await err(await speech(gw, key, { input: 'x', model: 'tts-2' }), 404, 'model_not_found', 'model');
  assert.match(nf.message, /Did you mean `tts-1`\?/);
  await err(await speech(gw, key, { input: 'x', model: 'whisper-1' }), 404, 'model_not_found', 'model');
  const notAudio = Buffer.from('this is not audio '.repeat(40));
  await err(await upload(gw, key, '/alpha/v1/audio/transcriptions', notAudio, 'a.wav'), 400, 'invalid_audio', 'file');
  await err(await upload(gw, key, '/alpha/v1/audio/transcriptions', notAudio, 'a.wav', { response_format: 'docx' }), 400, 'invalid_value', 'response_format');
  await err(await upload(gw, key, '/alpha/v1/audio/transcriptions', notAudio, 'a.wav', { model: 'whisper-2' }), 404, 'model_not_found', 'model');
  const cut = await gw.fetch('/alpha/v1/audio/transcriptions', { method: 'POST', headers: { ...bearer(key), 'content-type': 'multipart/form-data; boundary=XYZ' },
    body: '--XYZ\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF....' });
  await err(cut, 400, 'invalid_multipart');
  await err(await upload(gw, key, '/alpha/v1/audio/translations', Buffer.alloc(8192), 'big.wav'), 413, 'request_too_large');
  const { key: llmOnly } = await gw.account('1', { scopes: 'llm' });
  await err(await speech(gw, llmOnly, { input: 'x' }), 403, 'insufficient_scope');
  await err(await upload(gw, llmOnly, '/alpha/v1/audio/transcriptions', notAudio, 'a.wav'), 403, 'insufficient_scope');
  // an upstream that fails bills nothing
  await err(await speech(gw, key, { input: 'x' }, { 'x-sim-fail-status': '500' }), 502, 'upstream_error');
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(await balanceNano(gw, account), before, 'nothing billed');
  await assertInvariants(assert, gw, account);
});

test('a dropped speech stream: after audio reached the client, the whole text is billed; before any, nothing', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('10');
  const text = 'A long sentence that takes a while to speak, piece by piece. '.repeat(4);
  const chars = BigInt([...text].length);
  // the client leaves after its first read (sim waits 200 ms between 250 ms pieces)
  let before = await balanceNano(gw, account);
  const ac = new AbortController();
  const r = await speech(gw, key, { input: text, response_format: 'pcm' }, { 'x-sim-token-delay-ms': '200' });
  const reader = r.body.getReader();
  const first = await reader.read();
  assert.ok(first.value.length > 0);
  ac.abort(); await reader.cancel();
  await expectSpent(gw, account, before, chars * PER_CHAR);
  // the upstream breaks after two pieces: the stream is cut short, the whole text billed (partial)
  before = await balanceNano(gw, account);
  const broken = await speech(gw, key, { input: text, response_format: 'pcm' }, { 'x-sim-truncate-after': '2' });
  await assert.rejects(broken.arrayBuffer());
  await expectSpent(gw, account, before, chars * PER_CHAR);
  // the upstream breaks before any audio: nothing
  before = await balanceNano(gw, account);
  const none = await speech(gw, key, { input: text, response_format: 'pcm' }, { 'x-sim-truncate-after': '0' });
  // sim dies before its headers leave: an upstream error, in the family's envelope
  assert.equal(none.status, 502);
  assert.equal((await none.json()).error.code, 'upstream_unavailable');
  await new Promise((r2) => setTimeout(r2, 300));
  assert.equal(await balanceNano(gw, account), before);
  await assertInvariants(assert, gw, account);
});

/** A 0.1 s 16 kHz mono WAV: a voice sample. */
function sampleWav(seed) {
  const data = Buffer.alloc(3200);
  for (let i = 0; i < 1600; i++) data.writeInt16LE(Math.round(8000 * Math.sin((i * (seed + 1)) / 10)), i * 2);
  const h = Buffer.alloc(44);
  h.write('RIFF', 0); h.writeUInt32LE(36 + data.length, 4); h.write('WAVEfmt ', 8);
  h.writeUInt32LE(16, 16); h.writeUInt16LE(1, 20); h.writeUInt16LE(1, 22); h.writeUInt32LE(16000, 24);
  h.writeUInt32LE(32000, 28); h.writeUInt16LE(2, 32); h.writeUInt16LE(16, 34); h.write('data', 36); h.writeUInt32LE(data.length, 40);
  return Buffer.concat([h, data]);
}

test('a voice the account cloned speaks by id or {"id"} with the clone model at its price; another account\'s is 404, never its voice', async (t) => {
  const gw = await startGateway(t, OPTS);
  const a = await gw.account('10');
  const b = await gw.account('10');
  const form = new FormData();
  form.append('name', 'Narrator');
  for (const i of [1, 2]) form.append('files', new Blob([sampleWav(i)], { type: 'audio/wav' }), `s${i}.wav`);
  const added = await gw.fetch('/beta/v1/voices/add', { method: 'POST', headers: { 'xi-api-key': a.key }, body: form });
  assert.equal(added.status, 200);
  const { voice_id: id } = await added.json();
  const chars = BigInt([...TEXT].length);
  const CLONE_PER_CHAR = 30_000n; // sim-tts-clone: $30 per million characters

  const alloy = Buffer.from(await (await speech(gw, a.key, { input: TEXT, response_format: 'wav' })).arrayBuffer());
  let before = await balanceNano(gw, a.account);
  for (const voice of [id, { id }]) {
    const res = await speech(gw, a.key, { input: TEXT, voice, response_format: 'wav' });
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(res.headers.get('content-type'), 'audio/wav');
    const audio = Buffer.from(await res.arrayBuffer());
    const meta = await parseBuffer(audio, { mimeType: 'audio/wav' });
    assert.ok(Math.abs(meta.format.duration - [...TEXT].length * 0.06) < 0.01);
    assert.ok(!audio.equals(alloy), 'spoken in the cloned voice, not a preset');
    await expectSpent(gw, a.account, before, chars * CLONE_PER_CHAR);
    before -= chars * CLONE_PER_CHAR;
  }
  // The clone model speaks it, whichever speech model the request names; the text comes back from transcription.
  const res = await speech(gw, a.key, { input: TEXT, voice: { id }, model: 'gpt-4o-mini-tts', response_format: 'wav' });
  const heard = await (await upload(gw, a.key, '/alpha/v1/audio/transcriptions', Buffer.from(await res.arrayBuffer()), 'clone.wav')).json();
  assert.equal(heard.text, TEXT);
  await expectSpent(gw, a.account, before, chars * CLONE_PER_CHAR + BigInt(Math.ceil([...TEXT].length * 60)) * PER_MS);

  // Account B: A's voice is not found, exactly as an id that never existed; nothing is billed.
  const bBefore = await balanceNano(gw, b.account);
  const missing = [];
  for (const voice of [id, { id }, 'Zz9'.repeat(6) + 'Zz', { id: 'voice_1234' }]) {
    const r = await speech(gw, b.key, { input: TEXT, voice });
    const body = await r.json();
    assert.equal(r.status, 404, JSON.stringify(body));
    assert.deepEqual(Object.keys(body), ['error']);
    assert.equal(body.error.code, 'voice_not_found');
    assert.equal(body.error.param, 'voice');
    assert.equal(body.error.type, 'invalid_request_error');
    missing.push(body.error.message.replace(/'[^']*'/, "'…'"));
  }
  assert.equal(new Set(missing).size, 1, 'the same answer for another account\'s voice and one that never existed');
  let r = await speech(gw, b.key, { input: TEXT, voice: 'nobody' });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, 'invalid_value');
  r = await speech(gw, b.key, { input: TEXT, voice: '21m00Tcm4TlvDq8ikWAM' }); // the beta family's premade voice
  assert.equal(r.status, 400);
  r = await speech(gw, b.key, { input: TEXT, voice: { id, name: 'extra' } }); // the spec's object has only `id`
  assert.equal(r.status, 422);
  assert.equal((await r.json()).error.param, 'voice');
  await new Promise((x) => setTimeout(x, 200));
  assert.equal(await balanceNano(gw, b.account), bBefore, 'nothing billed to B');
  await assertInvariants(assert, gw, a.account);
  await assertInvariants(assert, gw, b.account);
});

/** A WAV of `ms` milliseconds of quiet noise (16-bit mono at 24 kHz). */
function wavOf(ms) {
  const samples = (24_000 * ms) / 1000;
  const b = Buffer.alloc(44 + samples * 2);
  b.write('RIFF', 0); b.writeUInt32LE(36 + samples * 2, 4); b.write('WAVEfmt ', 8); b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20); b.writeUInt16LE(1, 22); b.writeUInt32LE(24_000, 24); b.writeUInt32LE(48_000, 28);
  b.writeUInt16LE(2, 32); b.writeUInt16LE(16, 34); b.write('data', 36); b.writeUInt32LE(samples * 2, 40);
  for (let i = 0; i < samples; i++) b.writeInt16LE((i * 7919) % 200 - 100, 44 + i * 2);
  return b;
}

test('a transcription reports the seconds it is billed: usage.seconds 2.58 for a 2.58 s file billed 2,580 ms, in json and verbose_json, passed through or made by Tollgate', async (t) => {
  const gw = await startGateway(t, { ...OPTS, models: [{ id: 'sim-stt', upstream: 'sim', kind: 'stt', aliases: ['whisper-1'], audio_in_per_minute: '0.006' },
    { id: 'verbose-only-stt', upstream: 'verboseonly', kind: 'stt', upstream_model: 'sim-stt', audio_in_per_minute: '0.006' }],
  upstreams: { sim: { sim: {} }, verboseonly: { sim: { transcription: { response_formats: ['verbose_json'], stream: false } }, transcription: { response_formats: ['verbose_json'], stream: false } } } });
  const { key, account } = await gw.account('10');
  const wav = wavOf(2580);
  for (const [model, format] of [['whisper-1', 'json'], ['whisper-1', 'verbose_json'], ['verbose-only-stt', 'json']]) {
    const before = await balanceNano(gw, account);
    const r = await upload(gw, key, '/v1/audio/transcriptions', wav, 'a.wav', { model, response_format: format });
    const body = await r.json();
    assert.equal(r.status, 200, JSON.stringify(body));
    assert.deepEqual(body.usage, { type: 'duration', seconds: 2.58 }, `${model} ${format}`);
    await expectSpent(gw, account, before, 2580n * PER_MS);
  }
  // A translation has no usage in OpenAI's shape.
  const tr = await (await upload(gw, key, '/v1/audio/translations', wav, 'a.wav')).json();
  assert.equal(tr.usage, undefined);
  await assertInvariants(assert, gw, account);
});

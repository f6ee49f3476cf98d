// Transcription upstreams that lack what OpenAI's route offers (config `upstreams.<name>.transcription`): sim acting
// like faster-whisper-server (model in `model_name`, json and verbose_json only, no streaming, no word times), and
// Tollgate making text, srt, vtt, the SSE stream and ElevenLabs word timings from its verbose_json; billed as ever.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, assertInvariants, bearer, TEST_MODELS, balanceNano } from './helpers/gateway.mjs';

/** $0.006 per minute = 100 nanodollars a millisecond; sim speaks 60 ms a character. */
const PER_MS = 100n;
const TEXT = 'Hello from the gate. It opens --> now!';
const MS = BigInt([...TEXT].length * 60);

const LIKE_FASTER_WHISPER = { model_field: 'model_name', response_formats: ['json', 'verbose_json'], stream: false };
const UPSTREAMS = {
  sim: { sim: {} },
  // sim acting like faster-whisper-server 0.0.3, and Tollgate told so.
  lean: { sim: { transcription: { ...LIKE_FASTER_WHISPER, words: false } }, transcription: LIKE_FASTER_WHISPER },
  // The same host, Tollgate not told: what an operator sees without the capability config.
  untold: { sim: { transcription: { ...LIKE_FASTER_WHISPER, words: false } } },
  // A host that answers json only: no timings to make subtitles from.
  plain: { sim: { transcription: { response_formats: ['json'], stream: false } }, transcription: { response_formats: ['json'], stream: false } },
};
const stt = (id, upstream) => ({ id, upstream, upstream_model: 'whisper-1', kind: 'stt', audio_in_per_minute: '0.006' });
const MODELS = [...TEST_MODELS, stt('lean-stt', 'lean'), stt('untold-stt', 'untold'), stt('plain-stt', 'plain')];

async function expectSpent(gw, account, before, spent) {
  let now = await balanceNano(gw, account);
  for (let i = 0; i < 60 && before - now !== spent; i++) { await new Promise((r) => setTimeout(r, 50)); now = await balanceNano(gw, account); }
  assert.equal(before - now, spent);
}

function upload(gw, key, path, file, fields) {
  const form = new FormData();
  form.append('file', new Blob([file]), 'a.wav');
  for (const [k, v] of Object.entries(fields)) for (const x of [v].flat()) form.append(k, x);
  return gw.fetch(path, { method: 'POST', headers: { authorization: bearer(key).authorization }, body: form });
}

async function speak(gw, key) {
  const r = await gw.fetch('/alpha/v1/audio/speech', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tts-1', voice: 'alloy', input: TEXT, response_format: 'wav' }) });
  assert.equal(r.status, 200);
  return Buffer.from(await r.arrayBuffer());
}

let shared = null;
const teardown = [];
after(async () => { for (const f of teardown.reverse()) await f(); });
/** One gateway for the file (its tests run one after another, each measuring its own debits), stopped after the last. */
function start() {
  shared ??= (async () => {
    const gw = await startGateway({ after: (f) => teardown.push(f) }, { store: 'pglite', upstreams: UPSTREAMS, models: MODELS });
    const { key, account } = await gw.account('10');
    return { gw, key, account, wav: await speak(gw, key) };
  })();
  return shared;
}

test('an upstream with json and verbose_json only: text, srt and vtt are made from its verbose_json, as a full upstream makes them; each billed by the audio', async () => {
  const { gw, key, account, wav } = await start();
  for (const task of ['transcriptions', 'translations']) {
    for (const format of ['text', 'srt', 'vtt', 'json', 'verbose_json']) {
      const full = await upload(gw, key, `/v1/audio/${task}`, wav, { model: 'whisper-1', response_format: format });
      assert.equal(full.status, 200, await full.clone().text());
      const before = await balanceNano(gw, account);
      const lean = await upload(gw, key, `/v1/audio/${task}`, wav, { model: 'lean-stt', response_format: format });
      assert.equal(lean.status, 200, await lean.clone().text());
      assert.equal(lean.headers.get('content-type'), full.headers.get('content-type'), `${task} ${format}`);
      const body = await lean.text();
      if (format === 'verbose_json') assert.deepEqual(JSON.parse(body).segments, JSON.parse(await full.text()).segments);
      else assert.equal(body, await full.text(), `${task} ${format}`);
      await expectSpent(gw, account, before, MS * PER_MS);
    }
  }
  const srt = await (await upload(gw, key, '/v1/audio/transcriptions', wav, { model: 'lean-stt', response_format: 'srt' })).text();
  assert.equal(srt, '1\n00:00:00,000 --> 00:00:01,200\nHello from the gate.\n\n2\n00:00:01,260 --> 00:00:02,280\nIt opens -> now!\n\n');
  const vtt = await (await upload(gw, key, '/v1/audio/transcriptions', wav, { model: 'lean-stt', response_format: 'vtt' })).text();
  assert.equal(vtt, 'WEBVTT\n\n00:00:00.000 --> 00:00:01.200\nHello from the gate.\n\n00:00:01.260 --> 00:00:02.280\nIt opens -> now!\n\n');
  await assertInvariants(assert, gw, account);
});

test('stream=true on an upstream that does not stream: Tollgate answers the transcript.text events from the whole reply', async () => {
  const { gw, key, account, wav } = await start();
  const before = await balanceNano(gw, account);
  const r = await upload(gw, key, '/v1/audio/transcriptions', wav, { model: 'lean-stt', stream: 'true' });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const events = (await r.text()).trim().split('\n\n').map((e) => JSON.parse(e.replace(/^data: /, '')));
  const deltas = events.filter((e) => e.type === 'transcript.text.delta');
  assert.ok(deltas.length > 3);
  assert.equal(deltas.map((e) => e.delta).join(''), TEXT);
  assert.deepEqual(events.at(-1), { type: 'transcript.text.done', text: TEXT });
  await expectSpent(gw, account, before, MS * PER_MS);
  await assertInvariants(assert, gw, account);
});

test('the model goes in the field the upstream reads: without the capability config the host refuses, and nothing is billed', async () => {
  const { gw, key, account, wav } = await start();
  const before = await balanceNano(gw, account);
  const r = await upload(gw, key, '/v1/audio/transcriptions', wav, { model: 'untold-stt' });
  assert.equal(r.status, 400);
  const e = (await r.json()).error;
  assert.equal(e.code, 'upstream_invalid_request');
  assert.match(e.message, /model_name/);
  const srt = await upload(gw, key, '/v1/audio/transcriptions', wav, { model: 'untold-stt', response_format: 'srt' });
  assert.equal(srt.status, 400);
  assert.equal((await balanceNano(gw, account)), before);
  await assertInvariants(assert, gw, account);
});

test('a json-only upstream: text and the stream are made from json; srt is refused naming what is available, nothing billed', async () => {
  const { gw, key, account, wav } = await start();
  const text = await upload(gw, key, '/v1/audio/transcriptions', wav, { model: 'plain-stt', response_format: 'text' });
  assert.equal(await text.text(), `${TEXT}\n`);
  const before = await balanceNano(gw, account);
  for (const format of ['srt', 'vtt', 'verbose_json']) {
    const r = await upload(gw, key, '/v1/audio/transcriptions', wav, { model: 'plain-stt', response_format: format });
    assert.equal(r.status, 400);
    const e = (await r.json()).error;
    assert.equal(e.code, 'invalid_value');
    assert.equal(e.param, 'response_format');
    assert.equal(e.message, `Invalid value for 'response_format': '${format}' is not available for the model 'plain-stt'. Available: 'json', 'text'.`);
  }
  assert.equal((await balanceNano(gw, account)), before);
  await assertInvariants(assert, gw, account);
});

test('ElevenLabs speech-to-text from an upstream with segment times only: each segment\'s words fall within it', async () => {
  const { gw, key, account, wav } = await start();
  const ask = async (model) => {
    const form = new FormData();
    form.append('file', new Blob([wav]), 'a.wav');
    form.append('model_id', model);
    const r = await gw.fetch('/beta/v1/speech-to-text', { method: 'POST', headers: { 'xi-api-key': key }, body: form });
    assert.equal(r.status, 200, await r.clone().text());
    return r.json();
  };
  const before = await balanceNano(gw, account);
  const lean = await ask('lean-stt');
  await expectSpent(gw, account, before, MS * PER_MS);
  assert.equal(lean.text, TEXT);
  const words = lean.words.filter((w) => w.type === 'word');
  assert.deepEqual(words.map((w) => w.text), TEXT.split(' '));
  // Segments: "Hello from the gate." 0–1.2 s, "It opens --> now!" 1.26–2.28 s; their words share each segment's time.
  assert.deepEqual(words.slice(0, 4).map((w) => [w.start, w.end]), [[0, 0.3], [0.3, 0.6], [0.6, 0.9], [0.9, 1.2]]);
  assert.equal(words[4].start, 1.26);
  assert.equal(words.at(-1).end, 2.28);
  // A full upstream has word times of its own (sim's words leave out the punctuation at their ends).
  const full = await ask('scribe_v1');
  assert.deepEqual(full.words.filter((w) => w.type === 'word').map((w) => w.text), ['Hello', 'from', 'the', 'gate', 'It', 'opens', '-->', 'now']);
  await assertInvariants(assert, gw, account);
});

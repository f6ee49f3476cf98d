// Audio is billed by the length a decoder gets from it (frames counted, or samples decoded), never by a container's header: lying headers both ways, cut-off files and raw PCM, on the three audio-input routes.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, assertInvariants, bearer, dollarsToNano } from './helpers/gateway.mjs';
import { CONTAINERS, makeFixtures, lie, truncated, decodedSeconds, tolerance } from './helpers/audio-fixtures.mjs';
import { wav } from '../dist/audio/pcm.js';

const GEORGE = 'JBFqnCBsd6RMkjVDRZzb';
/** nd per minute: whisper-1 and scribe_v1 (sim-stt) $0.006, eleven_multilingual_sts_v2 (sim-sts) $0.18. */
const STT_PER_MIN = 6_000_000;
const STS_PER_MIN = 180_000_000;

const fixtures = makeFixtures();
after(() => fixtures.cleanup());

const ROUTES = {
  'alpha transcriptions': { perMin: STT_PER_MIN, send: (gw, key, data, name, extra = {}) => post(gw, key, '/v1/audio/transcriptions', 'file', data, name, { model: 'whisper-1', ...extra }) },
  'beta speech to text': { perMin: STT_PER_MIN, send: (gw, key, data, name, extra = {}) => post(gw, key, '/beta/v1/speech-to-text', 'file', data, name, { model_id: 'scribe_v1', ...extra }) },
  'beta speech to speech': { perMin: STS_PER_MIN, send: (gw, key, data, name, extra = {}) => post(gw, key, `/beta/v1/speech-to-speech/${GEORGE}?output_format=pcm_24000`, 'audio', data, name, { model_id: 'eleven_multilingual_sts_v2', ...extra }) },
};

async function post(gw, key, path, field, data, name, fields) {
  const form = new FormData();
  form.append(field, new Blob([data]), name);
  for (const [k, v] of Object.entries(fields)) form.append(k, v);
  const res = await gw.fetch(path, { method: 'POST', headers: { authorization: bearer(key).authorization }, body: form });
  const body = Buffer.from(await res.arrayBuffer());
  return { status: res.status, body };
}

async function balance(gw, key) {
  return dollarsToNano(String((await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json()).balance));
}

/** What the balance moved by after one request (a debit settles just after the reply ends). */
async function debitOf(gw, key, run) {
  const before = await balance(gw, key);
  const res = await run();
  let now = before;
  for (let i = 0; i < 100 && now === before && res.status === 200; i++) { await new Promise((r) => setTimeout(r, 30)); now = await balance(gw, key); }
  return { res, debit: Number(before - now) };
}

/** Asserts the debit is the price of `seconds` within `tol` seconds (one frame and the encoder's priming). */
function assertBilled(debit, perMin, seconds, tol, what) {
  const expected = (seconds * 1000 * perMin) / 60_000;
  const slack = (tol * 1000 * perMin) / 60_000 + 1;
  assert.ok(Math.abs(debit - expected) <= slack,
    `${what}: billed ${(debit / perMin * 60).toFixed(3)} s (${debit} nd), the audio is ${seconds.toFixed(3)} s (${Math.round(expected)} nd ± ${Math.round(slack)})`);
}

for (const [route, r] of Object.entries(ROUTES)) {
  test(`${route}: a 60 s tone in every container is billed 60 s whatever its length header says (tiny or huge), and a cut-off file what it holds`, async (t) => {
    const gw = await startGateway(t, { store: 'pglite' });
    const { key, account } = await gw.account('100');
    for (const name of Object.keys(CONTAINERS)) {
      const file = fixtures.files[name];
      const ext = CONTAINERS[name].ext;
      const cut = truncated(file);
      const cases = [['honest', file, 60], ['header says 0.7 s', lie(name, file, 0.7), 60], ['header says 10^6 s', lie(name, file, 1e6), 60], ['first 5%', cut, decodedSeconds(cut)]];
      for (const [kind, data, seconds] of cases) {
        const { res, debit } = await debitOf(gw, key, () => r.send(gw, key, data, `tone.${ext}`));
        assert.equal(res.status, 200, `${name} ${kind}: ${res.status} ${res.body.toString('utf8', 0, 300)}`);
        assertBilled(debit, r.perMin, seconds, tolerance(name), `${name} ${kind}`);
      }
    }
    await assertInvariants(assert, gw, account);
  });
}

/** 60 s of a 440 Hz tone as raw 16 kHz 16-bit mono PCM. */
function rawPcm(seconds = 60) {
  const n = seconds * 16_000;
  const b = Buffer.alloc(n * 2);
  for (let i = 0; i < n; i++) b.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / 16_000)), i * 2);
  return b;
}

test('file_format=pcm_s16le_16: raw PCM is billed by its length and transcribed or converted; a container declared raw is refused by name, nothing billed', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('20');
  const pcm = rawPcm();
  for (const route of ['beta speech to text', 'beta speech to speech']) {
    const r = ROUTES[route];
    const { res, debit } = await debitOf(gw, key, () => r.send(gw, key, pcm, 'audio.pcm', { file_format: 'pcm_s16le_16' }));
    assert.equal(res.status, 200, `${route}: ${res.status} ${res.body.toString('utf8', 0, 300)}`);
    assertBilled(debit, r.perMin, 60, 0, `${route} raw PCM`);
    if (route === 'beta speech to text') assert.match(JSON.parse(res.body.toString()).text, /60\.00 seconds/, 'the upstream heard 60 s (the PCM went as WAV)');
    else assert.equal(res.body.length, 60 * 24_000 * 2, 'converted speech as long as the input');
    for (const name of ['mp3', 'opus', 'wav']) {
      const before = await balance(gw, key);
      const refused = await r.send(gw, key, fixtures.files[name], `tone.${CONTAINERS[name].ext}`, { file_format: 'pcm_s16le_16' });
      assert.equal(refused.status, 422, `${route} ${name} declared raw: ${refused.status}`);
      const err = JSON.parse(refused.body.toString());
      assert.match(JSON.stringify(err), /file_format/);
      assert.match(JSON.stringify(err), name === 'mp3' ? /MP3/ : name === 'opus' ? /Ogg/ : /WAV/);
      assert.equal(await balance(gw, key), before, 'nothing billed');
    }
  }
  // the same PCM in a WAV, without the flag, is billed the same
  const { debit } = await debitOf(gw, key, () => ROUTES['beta speech to text'].send(gw, key, wav(pcm, 16_000), 'audio.wav'));
  assertBilled(debit, STT_PER_MIN, 60, 0, 'WAV of the same PCM');
  await assertInvariants(assert, gw, account);
});

test('without ffmpeg: frame-counted containers are still billed by their frames; WebM, MP4 and Ogg Vorbis are refused with 400 naming what is measured, nothing billed', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: { TOLLGATE_FFMPEG: 'none' } });
  const { key, account } = await gw.account('20');
  const r = ROUTES['alpha transcriptions'];
  for (const name of ['mp3', 'flac', 'opus', 'wav']) {
    const { res, debit } = await debitOf(gw, key, () => r.send(gw, key, lie(name, fixtures.files[name], 1e6), `tone.${CONTAINERS[name].ext}`));
    assert.equal(res.status, 200, `${name}: ${res.status}`);
    assertBilled(debit, r.perMin, 60, tolerance(name), `${name} (lying header) without ffmpeg`);
  }
  for (const name of ['webm', 'm4a', 'vorbis']) {
    const before = await balance(gw, key);
    const res = await r.send(gw, key, fixtures.files[name], `tone.${CONTAINERS[name].ext}`);
    assert.equal(res.status, 400, `${name}: ${res.status}`);
    const err = JSON.parse(res.body.toString()).error;
    assert.equal(err.code, 'invalid_audio');
    assert.match(err.message, /ffmpeg.*WAV.*MP3.*FLAC.*Ogg Opus/);
    assert.equal(await balance(gw, key), before, 'nothing billed');
  }
  await assertInvariants(assert, gw, account);
});

test('a measured audio cost the balance cannot cover is refused with 402 on every audio-input route, before the upstream, nothing billed', async (t) => {
  const gw = await startGateway(t);
  // $0.001: 60 s costs $0.006 to transcribe and $0.18 to convert, so none of the three fits.
  const { key, account } = await gw.account('0.001');
  const minute = wav(Buffer.alloc(60 * 16_000 * 2), 16_000);
  for (const [name, route] of Object.entries(ROUTES)) {
    const r = await route.send(gw, key, minute, 'minute.wav');
    assert.equal(r.status, 402, `${name}: ${r.body.toString().slice(0, 300)}`);
    assert.match(r.body.toString(), /needs up to \$0\.\d+ \(\d+ nd\); \$0\.001 \(1000000 nd\) is available/, name);
  }
  assert.equal(await balance(gw, key), 1_000_000n, 'nothing billed');
  // What the balance covers still runs: one second of audio.
  const second = await ROUTES['alpha transcriptions'].send(gw, key, wav(Buffer.alloc(16_000 * 2), 16_000), 'second.wav');
  assert.equal(second.status, 200, second.body.toString());
  await assertInvariants(assert, gw, account);
});

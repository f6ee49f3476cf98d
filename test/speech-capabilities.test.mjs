// An upstream's speech capabilities in config (speech_formats, speech_pcm_rate): Tollgate asks it for what it makes and makes
// the client's format itself — src/audio for pcm/wav/flac/mp3/opus, ffmpeg for aac — at the upstream's real PCM rate.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { parseBuffer } from 'music-metadata';
import { startGateway, assertInvariants, bearer, TEST_MODELS, balanceNano } from './helpers/gateway.mjs';

let ffmpeg = true;
try { execFileSync('ffmpeg', ['-hide_banner', '-encoders'], { stdio: 'ignore' }); } catch { ffmpeg = false; }

/** sim upstreams that make only wav and pcm (as Piper's server), and only pcm at 16 kHz (so sim's 24 kHz is read as 16 kHz). */
const UPSTREAMS = {
  sim: { sim: {} },
  wavpcm: { sim: {}, speech_formats: ['wav', 'pcm'] },
  pcm16: { sim: {}, speech_formats: ['pcm'], speech_pcm_rate: 16_000 },
  mp3only: { sim: {}, speech_formats: ['mp3'] },
};
const MODELS = [...TEST_MODELS,
  { id: 'wav-tts', upstream: 'wavpcm', upstream_model: 'sim-tts', kind: 'tts', per_mchar: '15' },
  { id: 'pcm16-tts', upstream: 'pcm16', upstream_model: 'sim-tts', kind: 'tts', per_mchar: '15' },
  { id: 'mp3-tts', upstream: 'mp3only', upstream_model: 'sim-tts', kind: 'tts', per_mchar: '15' },
];
const PER_CHAR = 15_000n;
const GEORGE = 'JBFqnCBsd6RMkjVDRZzb';
const TEXT = 'The gate is open.'; // 17 characters: 1.02 s of sim speech
const SECONDS = 17 * 0.06;

async function expectSpent(gw, account, before, spent) {
  let now = await balanceNano(gw, account);
  for (let i = 0; i < 60 && before - now !== spent; i++) { await new Promise((r) => setTimeout(r, 50)); now = await balanceNano(gw, account); }
  assert.equal(before - now, spent);
}

function speech(gw, key, body, headers = {}) {
  return gw.fetch('/alpha/v1/audio/speech', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ voice: 'alloy', input: TEXT, ...body }) });
}
function tts(gw, key, format, body = {}, suffix = '') {
  return gw.fetch(`/beta/v1/text-to-speech/${GEORGE}${suffix}?output_format=${format}`, { method: 'POST',
    headers: { 'xi-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ text: TEXT, ...body }) });
}
function decode(buf, fmt) {
  return execFileSync('ffmpeg', ['-v', 'error', '-f', fmt, '-i', 'pipe:0', '-f', 's16le', '-ac', '1', '-ar', '24000', 'pipe:1'], { input: buf, maxBuffer: 1 << 26 });
}
function rms(pcm) {
  let s = 0;
  for (let i = 0; i < pcm.length / 2; i++) s += pcm.readInt16LE(i * 2) ** 2;
  return Math.sqrt(s / Math.max(1, pcm.length / 2));
}

test('formats a wav+pcm upstream lacks are made by Tollgate from its pcm (not the upstream\'s own: no sim tag), the right length, billed by characters', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: UPSTREAMS, models: MODELS });
  const { key, account } = await gw.account('5');
  const types = { mp3: ['audio/mpeg', 'MPEG', 0.15], opus: ['audio/ogg', 'Ogg', 0.001], flac: ['audio/flac', 'FLAC', 0.001] };
  for (const [fmt, [type, container, slack]] of Object.entries(types)) {
    const before = await balanceNano(gw, account);
    const r = await speech(gw, key, { model: 'wav-tts', response_format: fmt });
    assert.equal(r.status, 200, fmt);
    assert.equal(r.headers.get('content-type'), type);
    const audio = Buffer.from(await r.arrayBuffer());
    const m = await parseBuffer(audio, { mimeType: type, size: audio.length }, { duration: true });
    assert.equal(m.format.container, container, fmt);
    assert.equal(m.format.sampleRate, 24_000, `${fmt}: OpenAI's speech is 24 kHz`);
    // a streamed FLAC states no length: its duration is what decodes
    const seconds = ffmpeg ? decode(audio, { mp3: 'mp3', opus: 'ogg', flac: 'flac' }[fmt]).length / 2 / 24_000 : m.format.duration ?? SECONDS;
    assert.ok(seconds >= SECONDS - 0.001 && seconds <= SECONDS + slack, `${fmt}: ${seconds}`);
    // sim tags what it makes with the text; what Tollgate made from sim's pcm has no such tag
    assert.ok(!audio.includes(Buffer.from('tollgate_sim_text', 'latin1')) && !audio.includes(Buffer.from('TOLLGATE_SIM_TEXT', 'latin1')), `${fmt} was made by Tollgate`);
    await expectSpent(gw, account, before, 17n * PER_CHAR);
  }
  // its own formats pass through (sim's tag is there)
  const wav = Buffer.from(await (await speech(gw, key, { model: 'wav-tts', response_format: 'wav' })).arrayBuffer());
  assert.equal(wav.length, 44 + 17 * 1440 * 2);
  // stream_format sse cannot be converted: refused, nothing billed
  const before = await balanceNano(gw, account);
  const sse = await speech(gw, key, { model: 'wav-tts', response_format: 'mp3', stream_format: 'sse' });
  assert.equal(sse.status, 400);
  assert.equal((await sse.json()).error.param, 'stream_format');
  assert.equal(await balanceNano(gw, account), before);
  await assertInvariants(assert, gw, account);
});

test('speech_pcm_rate is the upstream\'s real rate: beta formats and alpha pcm are resampled from it, timestamps follow it', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: UPSTREAMS, models: MODELS });
  const { key, account } = await gw.account('5');
  // sim sends 17 × 1440 samples; read at 16 kHz they last 1.53 s
  const upstreamSamples = 17 * 1440;
  const at = (rate) => Math.floor((upstreamSamples * rate) / 16_000) * 2;
  for (const [fmt, bytes] of [['pcm_16000', upstreamSamples * 2], ['pcm_24000', at(24_000)], ['pcm_8000', at(8_000)], ['ulaw_8000', at(8_000) / 2]]) {
    const r = await tts(gw, key, fmt, { model_id: 'pcm16-tts' });
    assert.equal(r.status, 200, fmt);
    assert.equal((await r.arrayBuffer()).byteLength, bytes, fmt);
  }
  const ts = await (await tts(gw, key, 'mp3_44100_128', { model_id: 'pcm16-tts' }, '/with-timestamps')).json();
  assert.equal(ts.alignment.character_end_times_seconds.at(-1), upstreamSamples / 16_000);
  const mp3 = Buffer.from(ts.audio_base64, 'base64');
  const m = await parseBuffer(mp3, { mimeType: 'audio/mpeg', size: mp3.length }, { duration: true });
  assert.ok(m.format.duration >= 1.53 - 0.001 && m.format.duration <= 1.53 + 0.1, `mp3 lasts what the upstream's pcm lasts: ${m.format.duration}`);
  // alpha's pcm is 24 kHz: the upstream's 16 kHz pcm is resampled, not passed on
  const pcm = await speech(gw, key, { model: 'pcm16-tts', response_format: 'pcm' });
  assert.equal((await pcm.arrayBuffer()).byteLength, at(24_000));
  await assertInvariants(assert, gw, account);
});

test('an upstream without pcm or wav: beta formats are refused with 400 naming what it makes, billed nothing', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: UPSTREAMS, models: MODELS, env: { TOLLGATE_FFMPEG: 'none' } });
  const { key, account } = await gw.account('5');
  const before = await balanceNano(gw, account);
  const r = await tts(gw, key, 'pcm_24000', { model_id: 'mp3-tts' });
  assert.equal(r.status, 400);
  const e = await r.json();
  assert.equal(e.error.param, 'output_format');
  assert.match(e.error.message, /makes only mp3/);
  // alpha: its own mp3 passes; wav needs ffmpeg (absent here): 400 naming what is available
  assert.equal((await speech(gw, key, { model: 'mp3-tts', response_format: 'mp3' })).status, 200);
  const w = await speech(gw, key, { model: 'mp3-tts', response_format: 'wav' });
  assert.equal(w.status, 400);
  assert.match((await w.json()).error.message, /Available: 'mp3'\./);
  await expectSpent(gw, account, before, 17n * PER_CHAR);
  await assertInvariants(assert, gw, account);
});

test('without ffmpeg, aac from a wav+pcm upstream is a 400 that names the formats available; nothing is billed', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: UPSTREAMS, models: MODELS, env: { TOLLGATE_FFMPEG: 'none' } });
  const { key, account } = await gw.account('5');
  const before = await balanceNano(gw, account);
  const r = await speech(gw, key, { model: 'wav-tts', response_format: 'aac' });
  assert.equal(r.status, 400);
  const e = (await r.json()).error;
  assert.deepEqual([e.code, e.param], ['invalid_value', 'response_format']);
  assert.match(e.message, /ffmpeg, which is not installed/);
  assert.match(e.message, /Available: 'mp3', 'opus', 'flac', 'wav', 'pcm'\./);
  assert.equal(await balanceNano(gw, account), before);
  assert.match(gw.output.stdout, /ffmpeg not found/);
  await assertInvariants(assert, gw, account);
});

test('with ffmpeg, aac from a wav+pcm upstream is real AAC of the speech\'s length; a client that leaves stops ffmpeg', { skip: !ffmpeg && 'ffmpeg not installed' }, async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: UPSTREAMS, models: MODELS });
  const { key, account } = await gw.account('5');
  assert.match(gw.output.stdout, /ffmpeg found/);
  const before = await balanceNano(gw, account);
  const r = await speech(gw, key, { model: 'wav-tts', response_format: 'aac' });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('content-type'), 'audio/aac');
  const aac = Buffer.from(await r.arrayBuffer());
  const pcm = decode(aac, 'aac');
  assert.ok(Math.abs(pcm.length / 2 / 24_000 - SECONDS) < 0.1, `aac lasts ${pcm.length / 2 / 24_000} s`);
  // made by Tollgate's ffmpeg from the wav+pcm upstream's pcm: it carries sim's tones
  assert.ok(rms(pcm) > 1000, `aac carries sound: rms ${rms(pcm)}`);
  await expectSpent(gw, account, before, 17n * PER_CHAR);

  // a long, slow speech (250 ms pieces every 300 ms): the client reads a little, then leaves
  const children = () => {
    try { return execFileSync('ps', ['-o', 'comm=', '--ppid', String(gw.proc.pid)]).toString().split('\n').filter((c) => c.trim() === 'ffmpeg'); } catch { return []; } // ps exits 1 when none
  };
  const ac = new AbortController();
  const long = await speech(gw, key, { model: 'wav-tts', response_format: 'aac', input: 'x'.repeat(400) }, { 'x-sim-token-delay-ms': '300' });
  const reader = long.body.getReader();
  await reader.read();
  assert.equal(children().length, 1, 'one ffmpeg converts the stream');
  ac.abort();
  await reader.cancel();
  let left = children().length;
  for (let i = 0; i < 50 && left > 0; i++) { await new Promise((res) => setTimeout(res, 100)); left = children().length; }
  assert.equal(left, 0, 'ffmpeg is gone once the client left');
  await assertInvariants(assert, gw, account);
});

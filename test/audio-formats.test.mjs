// src/audio and sim's audio contract: every declared format decodes (ffprobe when installed, and music-metadata) with the
// right duration; sim's speech transcribes back to its text; timings follow the audio.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeAudio, audioEncoder, ulaw, ulawDecode, alaw, alawDecode, parseWav, resample, fromWav, wavHeader } from '../dist/audio/index.js';
import { startSim } from '../dist/sim/index.js';
import { measureAudio } from '../dist/meter/audio.js';

let ffprobe = true;
try { execFileSync('ffprobe', ['-version'], { stdio: 'ignore' }); } catch { ffprobe = false; }

/** Container, codec, sample rate and duration as ffprobe reads them (decoding every frame: -count_packets). */
function probe(buf, ext) {
  const dir = mkdtempSync(join(tmpdir(), 'tg-audio-'));
  try {
    const f = join(dir, `a.${ext}`);
    writeFileSync(f, buf);
    // decoding the whole file must succeed without errors
    const errs = execFileSync('ffmpeg', ['-v', 'error', '-i', f, '-f', 's16le', '-ac', '1', '-'], { maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'pipe'] });
    const out = JSON.parse(execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'format=format_name,duration:stream=codec_name,sample_rate', '-of', 'json', f]).toString());
    const rate = Number(out.streams[0].sample_rate);
    // the duration of what decodes (ffprobe's own figure for Ogg Opus counts the pre-skip)
    return { format: out.format.format_name, codec: out.streams[0].codec_name, rate, duration: errs.length / 2 / rate };
  } finally { rmSync(dir, { recursive: true, force: true }); }
}

function tone(seconds, rate) {
  const pcm = Buffer.alloc(Math.round(seconds * rate) * 2);
  for (let i = 0; i < pcm.length / 2; i++) pcm.writeInt16LE(Math.round(Math.sin(i / 7) * 8000), i * 2);
  return pcm;
}

const EXT = { wav: 'wav', flac: 'flac', mp3: 'mp3', opus: 'ogg', aac: 'aac' };
const FF = { wav: ['wav', 'pcm_s16le'], flac: ['flac', 'flac'], mp3: ['mp3', 'mp3'], opus: ['ogg', 'opus'], aac: ['aac', 'aac'] };

test('every container format decodes with the duration of its PCM, at every declared rate', { skip: !ffprobe && 'ffprobe not installed' }, async () => {
  for (const codec of ['wav', 'flac', 'mp3', 'opus', 'aac']) {
    for (const rate of [8_000, 16_000, 22_050, 24_000, 44_100, 48_000]) {
      const buf = encodeAudio(codec, tone(1.5, 24_000), { inRate: 24_000, outRate: rate });
      const p = probe(buf, EXT[codec]);
      assert.deepEqual([p.format, p.codec], FF[codec], `${codec} ${rate}`);
      assert.equal(p.rate, codec === 'opus' ? 48_000 : rate, `${codec} ${rate}`);
      // mp3 and aac pad to whole frames (1152/576 and 1024 samples) and LAME adds its delay (no gapless tag):
      // longer by up to 200 ms at 8 kHz (576-sample frames are 72 ms there), never shorter
      const slack = codec === 'mp3' ? 0.2 : codec === 'aac' ? 0.1 : 0.001;
      assert.ok(p.duration >= 1.5 - 0.001 && p.duration <= 1.5 + slack, `${codec} ${rate}: ${p.duration}`);
      // what Tollgate bills an upload by: its frames counted (docs/reliability.md, "Audio length"); Opus bills
      // whole 20 ms packets with the encoder's pre-skip (ffprobe trims both), so up to one packet and 6.5 ms more, never less
      const m = await measureAudio(buf);
      const billed = m.durationMs / 1000;
      const ok = codec === 'opus' ? billed >= p.duration - 0.001 && billed <= p.duration + 0.02 + 0.0066
        : Math.abs(billed - p.duration) <= 0.001 || (codec === 'mp3' && Math.abs(billed - 1.5) <= slack);
      assert.ok(ok, `measured ${codec} ${rate}: ${m.durationMs} ms, decoded ${p.duration}`);
    }
  }
});

test('lossless formats keep every sample: WAV parses back, FLAC decodes to the same PCM', { skip: !ffprobe && 'ffprobe not installed' }, () => {
  const pcm = tone(0.7, 24_000);
  const w = parseWav(encodeAudio('wav', pcm, { inRate: 24_000 }));
  assert.equal(w.sampleRate, 24_000);
  assert.ok(w.data.equals(pcm));
  const dir = mkdtempSync(join(tmpdir(), 'tg-audio-'));
  try {
    writeFileSync(join(dir, 'a.flac'), encodeAudio('flac', pcm, { inRate: 24_000 }));
    const back = execFileSync('ffmpeg', ['-v', 'error', '-i', join(dir, 'a.flac'), '-f', 's16le', '-'], { maxBuffer: 1 << 26 });
    assert.ok(back.equals(pcm));
  } finally { rmSync(dir, { recursive: true, force: true }); }
});

test('a streamed encoder (odd-sized reads) makes the same bytes as a whole-buffer one', () => {
  const pcm = tone(0.5, 24_000);
  // (opus: the same packets, paged as they come: test/audio-opus.test.mjs)
  for (const codec of ['pcm', 'wav', 'flac', 'aac', 'ulaw', 'alaw']) {
    const e = audioEncoder(codec, { inRate: 24_000, totalSamples: pcm.length / 2 });
    const parts = [];
    for (let i = 0; i < pcm.length; i += 1001) parts.push(e.push(pcm.subarray(i, i + 1001)));
    parts.push(e.end());
    assert.ok(Buffer.concat(parts).equals(encodeAudio(codec, pcm, { inRate: 24_000 })), codec);
  }
  // resampling read by read gives the samples of resampling the whole buffer (Piper's 22.05 kHz to each rate)
  const p22 = tone(0.5, 22_050);
  for (const to of [8_000, 16_000, 24_000, 44_100, 48_000]) {
    const e = audioEncoder('pcm', { inRate: 22_050, outRate: to });
    const parts = [];
    for (let i = 0; i < p22.length; i += 333) parts.push(e.push(p22.subarray(i, i + 333)));
    parts.push(e.end());
    const whole = resample(new Int16Array(p22.buffer, p22.byteOffset, p22.length / 2), 22_050, to);
    assert.ok(Buffer.concat(parts).equals(Buffer.from(whole.buffer, whole.byteOffset, whole.byteLength)), `22050 → ${to}`);
  }
});

test('G.711 μ-law and A-law round-trip within their quantisation; the resampler keeps duration', () => {
  for (const s of [0, 1, -1, 100, -100, 1000, -1000, 12345, -12345, 32767, -32768]) {
    const tol = Math.max(16, Math.abs(s) / 16);
    assert.ok(Math.abs(ulawDecode(ulaw(s)) - s) <= tol, `ulaw ${s}`);
    assert.ok(Math.abs(alawDecode(alaw(s)) - s) <= tol, `alaw ${s}`);
  }
  const x = new Int16Array(24_000);
  for (const to of [8_000, 16_000, 22_050, 44_100, 48_000]) assert.equal(resample(x, 24_000, to).length, to);
});

async function withSim(fn) {
  const s = await startSim();
  try { await fn(s.url); } finally { await s.close(); }
}

async function speak(url, body) {
  const r = await fetch(`${url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'sim-tts', voice: 'alloy', ...body }) });
  return { status: r.status, type: r.headers.get('content-type'), body: Buffer.from(await r.arrayBuffer()) };
}

async function transcribe(url, file, name, fields = {}, path = '/v1/audio/transcriptions') {
  const form = new FormData();
  form.append('file', new Blob([file]), name);
  form.append('model', 'sim-stt');
  for (const [k, v] of Object.entries(fields)) for (const x of [v].flat()) form.append(k, x);
  const r = await fetch(`${url}${path}`, { method: 'POST', body: form });
  return { status: r.status, type: r.headers.get('content-type'), text: await r.text() };
}

const TEXT = 'Hello from sim. Ünïcode too!';

test('sim speaks every response_format with the right content type and 60 ms a character; transcribing gives the text back', async () => {
  await withSim(async (url) => {
    const types = { mp3: 'audio/mpeg', opus: 'audio/ogg', aac: 'audio/aac', flac: 'audio/flac', wav: 'audio/wav', pcm: 'audio/pcm' };
    for (const fmt of Object.keys(types)) {
      const r = await speak(url, { input: TEXT, response_format: fmt });
      assert.equal(r.status, 200);
      assert.equal(r.type, types[fmt]);
      const seconds = [...TEXT].length * 0.06;
      if (fmt === 'pcm') { assert.equal(r.body.length, Math.round(seconds * 24_000) * 2); continue; }
      if (ffprobe) {
        const p = probe(r.body, EXT[fmt]);
        assert.ok(p.duration >= seconds - 0.001 && p.duration <= seconds + 0.1, `${fmt}: ${p.duration}`);
      }
      const t = await transcribe(url, r.body, `speech.${EXT[fmt]}`);
      assert.equal(t.status, 200, t.text);
      assert.equal(JSON.parse(t.text).text, TEXT, fmt);
    }
  });
});

test('sim transcription formats: verbose_json words and segments follow the audio; text, srt, vtt; translations; stream events', async () => {
  await withSim(async (url) => {
    const audio = (await speak(url, { input: TEXT, response_format: 'wav' })).body;
    const v = JSON.parse((await transcribe(url, audio, 'a.wav', { response_format: 'verbose_json', 'timestamp_granularities[]': ['word', 'segment'] })).text);
    assert.equal(v.text, TEXT);
    assert.equal(v.duration, 1.68);
    assert.deepEqual(v.words.map((w) => w.word), ['Hello', 'from', 'sim', 'Ünïcode', 'too']);
    assert.deepEqual(v.words[0], { word: 'Hello', start: 0, end: 0.3 });
    assert.equal(v.words.at(-1).end, 1.68);
    assert.deepEqual(v.segments.map((s) => [s.text, s.start, s.end]), [[' Hello from sim.', 0, 0.9], [' Ünïcode too!', 0.96, 1.68]]);
    assert.equal((await transcribe(url, audio, 'a.wav', { response_format: 'text' })).text, `${TEXT}\n`);
    assert.equal((await transcribe(url, audio, 'a.wav', { response_format: 'srt' })).text, '1\n00:00:00,000 --> 00:00:00,900\nHello from sim.\n\n2\n00:00:00,960 --> 00:00:01,680\nÜnïcode too!\n\n');
    assert.match((await transcribe(url, audio, 'a.wav', { response_format: 'vtt' })).text, /^WEBVTT\n\n00:00:00\.000 --> 00:00:00\.900\nHello from sim\.\n/);
    const tr = JSON.parse((await transcribe(url, audio, 'a.wav', { response_format: 'verbose_json' }, '/v1/audio/translations')).text);
    assert.equal(tr.task, 'translate');
    assert.equal(tr.language, 'english');
    const s = await transcribe(url, audio, 'a.wav', { stream: 'true' });
    assert.equal(s.type, 'text/event-stream');
    const events = s.text.trim().split('\n\n').map((e) => JSON.parse(e.slice(6)));
    assert.equal(events.filter((e) => e.type === 'transcript.text.delta').map((e) => e.delta).join(''), 'Hello from sim Ünïcode too');
    assert.deepEqual({ type: events.at(-1).type, text: events.at(-1).text }, { type: 'transcript.text.done', text: TEXT });
    // audio sim did not make: a fixed sentence naming its duration
    const other = JSON.parse((await transcribe(url, encodeAudio('mp3', tone(2, 24_000), { inRate: 24_000 }), 'x.mp3')).text);
    assert.match(other.text, /^This is sim, the simulated transcriber, hearing 2\.\d\d seconds of audio\.$/);
    const bad = await transcribe(url, Buffer.from('not audio at all'.repeat(10)), 'x.wav');
    assert.equal(bad.status, 400);
  });
});

test('sim speech as SSE: speech.audio.delta events carry the audio, speech.audio.done ends with usage', async () => {
  await withSim(async (url) => {
    const r = await speak(url, { input: TEXT, response_format: 'pcm', stream_format: 'sse' });
    assert.equal(r.type, 'text/event-stream');
    const events = r.body.toString().trim().split('\n\n').map((e) => JSON.parse(e.slice(6)));
    const audio = Buffer.concat(events.filter((e) => e.type === 'speech.audio.delta').map((e) => Buffer.from(e.audio, 'base64')));
    assert.ok(audio.equals((await speak(url, { input: TEXT, response_format: 'pcm' })).body));
    assert.ok(events.length > 2, 'more than one delta: streamed in pieces');
    assert.equal(events.at(-1).type, 'speech.audio.done');
    assert.equal(typeof events.at(-1).usage.total_tokens, 'number');
    const bad = await speak(url, { input: 'x', response_format: 'ogg' });
    assert.equal(bad.status, 400);
  });
});

test('fromWav reads a WAV stream across any read sizes and encodes its samples at the rate its header states', () => {
  const pcm = tone(0.5, 22_050);
  const file = Buffer.concat([wavHeader(pcm.length, 22_050), pcm]);
  const want = encodeAudio('pcm', pcm, { inRate: 22_050, outRate: 16_000 });
  for (const size of [1, 7, 43, 44, 45, 1001, file.length]) {
    const e = fromWav((rate) => audioEncoder('pcm', { inRate: rate, outRate: 16_000 }));
    const parts = [];
    for (let i = 0; i < file.length; i += size) parts.push(e.push(file.subarray(i, i + size)));
    parts.push(e.end());
    assert.ok(Buffer.concat(parts).equals(want), `reads of ${size}`);
  }
  // the declared data size is kept: a chunk after the data is not audio
  const e = fromWav((rate) => audioEncoder('pcm', { inRate: rate }));
  const out = Buffer.concat([e.push(Buffer.concat([file, Buffer.from('LIST\x04\x00\x00\x00abcd', 'latin1')])), e.end()]);
  assert.ok(out.equals(pcm));
  const stereo = wavHeader(4, 22_050, 2);
  assert.throws(() => fromWav((rate) => audioEncoder('pcm', { inRate: rate })).push(stereo), /2 channel/);
});

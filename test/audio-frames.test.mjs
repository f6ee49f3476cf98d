// The frame counters behind audio billing, in process: cut at every point, with junk between frames, and with frames a walk must not trust (then decoded).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { measureAudio, countFrames } from '../dist/meter/audio.js';
import { findFfmpeg } from '../dist/audio/ffmpeg.js';
import { wav } from '../dist/audio/pcm.js';
import { makeFixtures, decodedSeconds, tolerance } from './helpers/audio-fixtures.mjs';

const fixtures = makeFixtures();
after(() => fixtures.cleanup());
const ffmpeg = await findFfmpeg();

test('a file cut at any point is counted by the whole frames it holds: never more than the whole file, never less as it grows', () => {
  for (const name of ['mp3', 'mp3_8k', 'opus', 'flac', 'wav']) {
    const file = fixtures.files[name];
    const full = countFrames(file).seconds;
    let last = 0;
    const step = Math.max(1, Math.floor(file.length / 400));
    for (let n = step; n <= file.length; n += step) {
      const c = countFrames(file.subarray(0, n));
      const s = c ? c.seconds : 0;
      assert.ok(s >= last - 1e-9, `${name} cut at ${n}: ${s} s after ${last} s`);
      assert.ok(s <= full + 1e-9, `${name} cut at ${n}: ${s} s of ${full} s`);
      assert.ok(!c || c.uncovered <= 32 * 1024, `${name} cut at ${n}: ${c?.uncovered} bytes unplaced (a cut leaves at most one frame)`);
      last = s;
    }
    assert.ok(Math.abs(full - 60) <= tolerance(name), `${name}: ${full} s`);
  }
});

test('junk between MP3 frames is skipped and every frame after it still counted, as a decoder resynchronises', async () => {
  const mp3 = fixtures.files.mp3;
  const mid = 240_001; // inside a frame: the walk must find the next one
  const junk = Buffer.alloc(3000, 0x5a);
  const spliced = Buffer.concat([mp3.subarray(0, mid), junk, mp3.subarray(mid)]);
  const a = await measureAudio(spliced);
  assert.equal(a.method, 'frames');
  assert.ok(Math.abs(a.durationMs / 1000 - decodedSeconds(spliced)) <= tolerance('mp3'), `${a.durationMs} ms`);
});

test('a walk that leaves much of the file unplaced is not believed: the file is decoded, or refused without a decoder', async (t) => {
  if (!ffmpeg) { t.skip('no ffmpeg'); return; }
  // FLAC with one frame whose CRC-16 fails (a bit of audio flipped): a decoder still decodes it, so the file is decoded
  const flac = Buffer.from(fixtures.files.flac);
  flac[300_000] ^= 0x01;
  const f = await measureAudio(flac, { ffmpeg });
  assert.equal(f.method, 'decoded');
  assert.ok(Math.abs(f.durationMs / 1000 - decodedSeconds(flac)) <= 0.01, `${f.durationMs} ms`);
  await assert.rejects(measureAudio(flac), (e) => e.status === 400 && e.code === 'invalid_audio' && /ffmpeg/.test(e.message));
  // Ogg pages whose CRC fails
  const ogg = Buffer.from(fixtures.files.opus);
  for (let p = ogg.indexOf('OggS', 4096); p > 0 && p < ogg.length; p = ogg.indexOf('OggS', p + 60_000)) ogg[p + 30] ^= 0xff;
  const o = await measureAudio(ogg, { ffmpeg });
  assert.equal(o.method, 'decoded');
});

test('WAV: every data chunk present counts, a streamed size (0xFFFFFFFF) runs to the end, a size past the end counts what is there', async () => {
  const pcm = Buffer.alloc(16_000 * 2 * 3); // 3 s at 16 kHz
  const one = wav(pcm, 16_000);
  assert.equal((await measureAudio(one)).durationMs, 3000);
  const streamed = Buffer.from(one); streamed.writeUInt32LE(0xffffffff, 40);
  assert.equal((await measureAudio(streamed)).durationMs, 3000);
  const claims = Buffer.from(one); claims.writeUInt32LE(16_000 * 2 * 3600, 40); // says an hour
  assert.equal((await measureAudio(claims)).durationMs, 3000);
  const second = Buffer.concat([Buffer.from('data'), Buffer.alloc(4), pcm.subarray(0, 32_000)]);
  second.writeUInt32LE(32_000, 4);
  const two = Buffer.concat([one, second]);
  assert.equal((await measureAudio(two)).durationMs, 4000, 'a second data chunk is decoded too');
});

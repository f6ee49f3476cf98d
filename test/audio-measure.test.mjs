// Tollgate measures an upload's duration from the file itself: what speech input is billed by.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { measureAudio, pcmDurationMs } from '../dist/meter/audio.js';
import { wav } from './helpers/wav.mjs';

test('a WAV file\'s duration is read from its header and data, whatever the client says it is', async () => {
  const a = await measureAudio(wav(1.5), { mimeType: 'audio/wav', filename: 'a.wav' });
  assert.equal(a.durationMs, 1500);
  assert.equal(a.container, 'WAVE');
  assert.equal(a.sampleRate, 16_000);
  // a misleading name or type changes nothing: the bytes decide
  assert.equal((await measureAudio(wav(0.25, { rate: 24_000 }), { mimeType: 'audio/mpeg', filename: 'x.mp3' })).durationMs, 250);
});

test('a file that is not audio, or is empty, is refused with 400 invalid_audio before anything is billed', async () => {
  for (const data of [Buffer.from('this is plainly not audio at all, just some text'.repeat(20)), Buffer.alloc(0)]) {
    await assert.rejects(measureAudio(data, { filename: 'x.wav' }), (e) => e.status === 400 && e.code === 'invalid_audio' && e.param === 'file');
  }
});

test('raw 16-bit PCM has no container: its duration follows from its length', () => {
  assert.equal(pcmDurationMs(32_000, 16_000), 1000);
  assert.equal(pcmDurationMs(1, 16_000), 1, 'rounded up');
});

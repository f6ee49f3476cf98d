// sim's side of the voice-cloning and conversion contracts (docs/upstreams.md), spoken to over HTTP as Tollgate does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startSim } from '../dist/sim/index.js';
import { wav } from './helpers/wav.mjs';

test('sim clones a voice from samples, converts speech to it at the input length, and forgets it', async (t) => {
  const sim = await startSim();
  t.after(() => sim.close());
  const add = new FormData();
  add.append('name', 'Narrator');
  add.append('model', 'sim-tts-clone');
  add.append('files', new Blob([wav(0.5)], { type: 'audio/wav' }), 'a.wav');
  const again = new FormData();
  for (const [k, v] of add.entries()) again.append(k, v);
  const { voice_id: id } = await (await fetch(`${sim.url}/v1/audio/voices`, { method: 'POST', body: add })).json();
  assert.match(id, /^simvoice_[0-9a-f]{20}$/);
  const { voice_id: same } = await (await fetch(`${sim.url}/v1/audio/voices`, { method: 'POST', body: again })).json();
  assert.equal(same, id, 'the same samples and name give the same id');

  const conv = new FormData();
  conv.append('file', new Blob([wav(1.25)], { type: 'audio/wav' }), 'in.wav');
  conv.append('model', 'sim-sts');
  conv.append('voice', id);
  conv.append('response_format', 'pcm');
  const res = await fetch(`${sim.url}/v1/audio/voice-conversion`, { method: 'POST', body: conv });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'audio/pcm');
  const pcm = Buffer.from(await res.arrayBuffer());
  assert.equal(pcm.length, 1.25 * 24000 * 2, 'as long as the input, at 24 kHz');
  assert.ok(pcm.readInt16LE(200) !== 0, 'it is sound, not silence');

  const raw = new FormData();
  raw.append('file', new Blob([Buffer.alloc(32000)]), 'in.pcm');
  raw.append('voice', id);
  raw.append('input_format', 'pcm_s16le_16');
  assert.equal((await (await fetch(`${sim.url}/v1/audio/voice-conversion`, { method: 'POST', body: raw })).arrayBuffer()).byteLength, 48000);

  const bad = new FormData();
  bad.append('file', new Blob([Buffer.from('not audio at all')]), 'x.bin');
  bad.append('voice', id);
  assert.equal((await fetch(`${sim.url}/v1/audio/voice-conversion`, { method: 'POST', body: bad })).status, 400);

  assert.equal((await fetch(`${sim.url}/v1/audio/voices/${id}`, { method: 'DELETE' })).status, 200);
  conv.set('voice', id);
  const gone = await fetch(`${sim.url}/v1/audio/voice-conversion`, { method: 'POST', body: conv });
  assert.equal(gone.status, 404);
  assert.equal((await gone.json()).error.code, 'voice_not_found');
});

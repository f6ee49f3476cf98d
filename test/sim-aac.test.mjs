// sim's aac (issue 24): sim makes real AAC (ffmpeg's encoder) or does not claim aac at all; Tollgate then makes or
// refuses it, and the start-up log says which. Never silent audio billed as speech.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, assertInvariants, bearer, TEST_MODELS, balanceNano } from './helpers/gateway.mjs';
import { hasFfmpeg, probeAudio } from './helpers/audio.mjs';
import { startSim } from '../dist/sim/index.js';

const TEXT = 'Real audio in every format sim claims.';
const SECONDS = [...TEXT].length * 0.06;
const PER_CHAR = 15_000n;
const speechBody = JSON.stringify({ model: 'sim-tts', voice: 'alloy', input: TEXT, response_format: 'aac' });

test('aac from sim is real AAC: directly and through the gateway it decodes to sound of the speech\'s length, billed by characters', { skip: !hasFfmpeg && 'ffmpeg not installed' }, async (t) => {
  const sim = await startSim();
  t.after(() => sim.close());
  const direct = await fetch(`${sim.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: speechBody });
  assert.equal(direct.status, 200);
  const gw = await startGateway(t, { store: 'pglite', models: TEST_MODELS });
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const viaGateway = await gw.fetch('/alpha/v1/audio/speech', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: speechBody });
  assert.equal(viaGateway.status, 200);
  assert.equal(viaGateway.headers.get('content-type'), 'audio/aac');
  for (const r of [direct, viaGateway]) {
    const p = probeAudio(Buffer.from(await r.arrayBuffer()), 'aac');
    assert.equal(p.codec, 'aac');
    // AAC adds its encoder delay and pads to a whole 1024-sample frame: at most ~0.1 s longer
    assert.ok(p.decodedSeconds >= SECONDS - 0.001 && p.decodedSeconds <= SECONDS + 0.1, `${p.decodedSeconds} s for ${SECONDS} s`);
    assert.ok(p.peak > 3000, `it carries sim's tones (peak ${p.peak})`);
  }
  assert.equal(before - (await balanceNano(gw, account)), BigInt([...TEXT].length) * PER_CHAR);
  assert.ok(sim.speechFormats.includes('aac'), 'with ffmpeg sim claims aac');
  await assertInvariants(assert, gw, account);
});

test('without ffmpeg sim claims no aac (400 asked directly); the gateway refuses aac with 400, bills nothing, and its start-up log says so', async (t) => {
  const sim = await startSim({ ffmpeg: null });
  t.after(() => sim.close());
  const direct = await fetch(`${sim.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: speechBody });
  assert.equal(direct.status, 400);
  assert.match((await direct.json()).error.message, /makes aac with ffmpeg, which it did not find/);
  assert.deepEqual([...sim.speechFormats], ['mp3', 'opus', 'flac', 'wav', 'pcm']);

  const gw = await startGateway(t, { store: 'pglite', models: TEST_MODELS, env: { TOLLGATE_FFMPEG: 'none' } });
  assert.match(gw.output.stdout, /ffmpeg not found: aac speech is refused with 400 on sim/);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const r = await gw.fetch('/alpha/v1/audio/speech', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: speechBody });
  assert.equal(r.status, 400);
  const e = (await r.json()).error;
  assert.deepEqual([e.code, e.param], ['invalid_value', 'response_format']);
  assert.match(e.message, /Available: 'mp3', 'opus', 'flac', 'wav', 'pcm'\./);
  assert.equal(await balanceNano(gw, account), before);
  await assertInvariants(assert, gw, account);
});

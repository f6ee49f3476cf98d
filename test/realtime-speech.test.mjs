// Realtime speech from a speech upstream whose PCM is not at 24 kHz: every sentence's audio is resampled whole, its tail included.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, assertInvariants, TEST_MODELS } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';

/** sim speaks 24 kHz PCM; this upstream is declared 16 kHz (as Piper's low-quality voices), so the gateway resamples each sentence to 24 kHz. */
const UPSTREAMS = { sim: { sim: {} }, piper: { sim: {}, speech_formats: ['pcm'], speech_pcm_rate: 16_000 } };
const MODELS = [...TEST_MODELS.filter((m) => m.kind !== 'tts'), { id: 'piper-tts', upstream: 'piper', upstream_model: 'sim-tts', kind: 'tts', per_mchar: '15' }];
/** sim's speech: 60 ms a character at 24 kHz. */
const SAMPLES_PER_CHAR = 1440;

/** The chunks the reply is spoken in, cut from its text as it streamed (the gateway's own rule: src/families/alpha/realtime/sentences.ts). */
function sentences(deltas, sentenceCut) {
  const out = [];
  let pending = '';
  for (const d of deltas) {
    pending += d;
    for (let cut = sentenceCut(pending); cut > 0; cut = sentenceCut(pending)) { out.push(pending.slice(0, cut)); pending = pending.slice(cut); }
  }
  if (pending.trim().length > 0) out.push(pending);
  return out;
}

test('a spoken reply from a 16 kHz speech upstream: the audio of each sentence is its whole resampled length, no sample of its tail lost', async (t) => {
  const { sentenceCut } = await import('../dist/families/alpha/realtime/sentences.js');
  const gw = await startGateway(t, { store: 'pglite', upstreams: UPSTREAMS, models: MODELS, realtime: { speech_model: 'piper-tts' } });
  const { key, account } = await gw.account('1');
  const s = await connect(`${gw.url.replace(/^http/, 'ws')}/alpha/v1/realtime?model=sim-chat`, { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  await s.until((e) => e.type === 'session.created');
  s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Tell me a long story about gateways.' }] } });
  s.send({ type: 'response.create', response: { output_modalities: ['audio'], max_output_tokens: 120 } });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed', JSON.stringify(done.response.status_details));
  const deltas = s.frames.filter((e) => e.type === 'response.output_audio_transcript.delta').map((e) => e.delta);
  const chunks = sentences(deltas, sentenceCut);
  assert.equal(chunks.join(''), done.response.output[0].content[0].transcript);
  assert.ok(chunks.length > 1, `spoken in several sentences: ${JSON.stringify(chunks)}`);
  // Each sentence: the upstream's samples (at 16 kHz) resampled to 24 kHz, floor(n · 24000 / 16000), none left in the resampler.
  const expected = chunks.reduce((sum, c) => sum + Math.floor(([...c].length * SAMPLES_PER_CHAR * 24_000) / 16_000), 0);
  const audio = Buffer.concat(s.frames.filter((e) => e.type === 'response.output_audio.delta').map((e) => Buffer.from(e.delta, 'base64')));
  assert.equal(audio.length / 2, expected, `${chunks.length} sentences: ${audio.length / 2} samples delivered, ${expected} resampled`);
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

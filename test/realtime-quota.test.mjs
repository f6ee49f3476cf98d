// Realtime sessions under a key's per-minute usage limits: a response or an audio turn whose worst case does not fit is refused
// (the official client sees an `error` event rate_limit_exceeded saying what the session was billed, then a 1008 close), and
// nothing is billed for it; what ran before is billed exactly.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, assertInvariants, priceNano, dollarsToNano, TEST_MODELS } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';

const UPSTREAMS = { sim: { sim: {} }, rt: { sim: {}, realtime_api: true } };
/** A pass-through model priced as the chat model (text tokens: $0.30 in, $2.50 out per 1M). */
const PASS = { id: 'sim-rt-pass', upstream: 'rt', upstream_model: 'sim-chat', kind: 'realtime', simulated: true,
  input_per_mtok: '0.30', audio_input_per_mtok: '32', output_per_mtok: '2.50', audio_output_per_mtok: '64', max_output_tokens: 4096 };
const OPTS = { store: 'postgres', upstreams: UPSTREAMS, models: [...TEST_MODELS, PASS] };
/** Tokens a minute: a short response's worst case (its prompt's bytes and 20 tokens out) fits, one asking for 400 out does not. */
const TPM = 400;

const balanceNano = async (gw, account) => BigInt(Math.round((await gw.cli('account', 'show', account)).balance * 1e9));
async function spentBecomes(gw, account, before, spent) {
  let now = await balanceNano(gw, account);
  for (let i = 0; i < 60 && before - now !== spent; i++) { await new Promise((x) => setTimeout(x, 50)); now = await balanceNano(gw, account); }
  return before - now;
}

const wsUrl = (gw, model) => `${gw.url.replace(/^http/, 'ws')}/alpha/v1/realtime?model=${model}`;
const ask = (max, extra = {}) => ({ type: 'response.create', response: { ...extra, conversation: 'none', max_output_tokens: max,
  input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say hi.' }] }] } });

/** The refusal the client sees: an error event for the rate limit, naming the dimension and what the session was billed. */
function assertTold(err, dimension, billed) {
  assert.equal(err.error.code, 'rate_limit_exceeded', JSON.stringify(err));
  assert.match(err.error.message, new RegExp(`on ${dimension}`), err.error.message);
  const said = /This session was billed \$([0-9.]+) \((\d+) nd\) in all\./.exec(err.error.message);
  assert.ok(said, `the error says what the session was billed: ${err.error.message}`);
  assert.equal(BigInt(said[2]), billed);
}

for (const [name, model, extra] of [['the cascade', 'sim-chat', { output_modalities: ['text'] }], ['the pass-through', 'sim-rt-pass', {}]]) {
  test(`${name}: a response whose worst case passes the key's tokens per minute is refused with rate_limit_exceeded, billed nothing, and the session closes with 1008`, async (t) => {
    const gw = await startGateway(t, OPTS);
    const { key, account } = await gw.account('1', { tpm: TPM });
    const before = await balanceNano(gw, account);
    const s = await connect(wsUrl(gw, model), { headers: { authorization: `Bearer ${key}` } });
    assert.ok(s.ws, JSON.stringify(s.refused));
    await s.until((e) => e.type === 'session.created');
    // A short response fits: it runs and is billed its tokens.
    s.send(ask(20, extra));
    const done = await s.until((e) => e.type === 'response.done');
    assert.notEqual(done.response.status, 'failed', JSON.stringify(done.response.status_details));
    const u = done.response.usage;
    const billed = priceNano(u.input_tokens, u.output_tokens);
    assert.equal(dollarsToNano(String(u.cost)), billed);
    // One asking for more output than the minute has tokens left is refused before it runs.
    const from = s.frames.length;
    s.send(ask(TPM, extra));
    const err = await s.until((e) => e.type === 'error', from);
    assertTold(err, 'tokens per min', billed);
    assert.equal((await s.closed).code, 1008, 'the session ends');
    assert.ok(!s.frames.slice(from).some((e) => e.type === 'response.created' || e.type === 'response.output_text.delta'), 'the refused response never ran');
    assert.equal(await spentBecomes(gw, account, before, billed), billed, 'billed exactly the response that ran, nothing for the refused one');
    await assertInvariants(assert, gw, account);
  });
}

test('the cascade: an audio turn longer than the key\'s audio seconds per minute is refused: its transcription fails with rate_limit_exceeded, nothing is billed, the session closes with 1008', async (t) => {
  const { synth } = await import('../dist/sim/speech.js');
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1', { audioSecsPerMin: 1 });
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw, 'sim-chat'), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  await s.until((e) => e.type === 'session.created');
  s.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], audio: { input: { turn_detection: null, transcription: { model: 'whisper-1' } } } } });
  await s.until((e) => e.type === 'session.updated');
  // About two seconds of speech, committed by hand: its transcription would take two audio seconds, the minute allows one.
  const speech = synth('What is the capital of France?');
  assert.ok(speech.length > 24_000 * 1.5, `${speech.length / 24} ms of speech`);
  const bytes = Buffer.from(speech.buffer, speech.byteOffset, speech.byteLength);
  for (let i = 0; i < bytes.length; i += 4800) s.send({ type: 'input_audio_buffer.append', audio: bytes.subarray(i, i + 4800).toString('base64') });
  s.send({ type: 'input_audio_buffer.commit' });
  const failed = await s.until((e) => e.type === 'conversation.item.input_audio_transcription.failed');
  assert.equal(failed.error.code, 'rate_limit_exceeded');
  const err = await s.until((e) => e.type === 'error');
  assertTold(err, 'audio seconds per min', 0n);
  assert.equal((await s.closed).code, 1008);
  assert.ok(!s.frames.some((e) => e.type === 'conversation.item.input_audio_transcription.completed'), 'nothing was transcribed');
  assert.equal(await spentBecomes(gw, account, before, 0n), 0n, 'nothing billed');
  await assertInvariants(assert, gw, account);
});

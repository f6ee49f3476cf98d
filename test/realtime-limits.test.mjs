// A realtime session whose key ceiling runs out mid-session (cascade and pass-through): an error event saying so and what the
// session was billed, a 1008 close, nothing more run; each response.done's usage carries its cost, exactly its debit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, assertInvariants, priceNano, dollarsToNano, TEST_MODELS } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';

const UPSTREAMS = { sim: { sim: {} }, rt: { sim: {}, realtime_api: true } };
/** A pass-through model priced as the chat model (text tokens: $0.30 in, $2.50 out per 1M). */
const PASS = { id: 'sim-rt-pass', upstream: 'rt', upstream_model: 'sim-chat', kind: 'realtime', simulated: true,
  input_per_mtok: '0.30', audio_input_per_mtok: '32', output_per_mtok: '2.50', audio_output_per_mtok: '64', max_output_tokens: 4096 };
const OPTS = { store: 'pglite', upstreams: UPSTREAMS, models: [...TEST_MODELS, PASS] };
/** $0.0001: a couple of responses. */
const CEILING = '0.0001';

const balanceNano = async (gw, account) => BigInt(Math.round((await gw.cli('account', 'show', account)).balance * 1e9));
async function spentBecomes(gw, account, before, spent) {
  let now = await balanceNano(gw, account);
  for (let i = 0; i < 60 && before - now !== spent; i++) { await new Promise((x) => setTimeout(x, 50)); now = await balanceNano(gw, account); }
  return before - now;
}

/** Responses until the ceiling refuses one; returns what the completed ones cost (their response.done usage.cost) and the error. */
async function untilRefused(s, response) {
  let billed = 0n;
  let responses = 0;
  for (let i = 0; i < 40; i++) {
    const from = s.frames.length;
    s.send({ type: 'response.create', response: { ...response, conversation: 'none', max_output_tokens: 300,
      input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: `Tell me a long story, part ${i}.` }] }] } });
    const next = await s.until((e) => (e.type === 'response.done' && e.response.status !== 'failed') || e.type === 'error', from);
    if (next.type === 'error') return { billed, responses, err: next, at: s.frames.indexOf(next) };
    const u = next.response.usage;
    // The cost is exactly the response's token price (decimal dollars, at most 9 places).
    assert.equal(dollarsToNano(String(u.cost)), priceNano(u.input_tokens, u.output_tokens), JSON.stringify(u));
    billed += dollarsToNano(String(u.cost));
    responses++;
  }
  throw new Error('the ceiling never ran out');
}

for (const [name, model, response] of [['the cascade', 'sim-chat', { output_modalities: ['text'] }], ['the pass-through', 'sim-rt-pass', {}]]) {
  test(`${name}: a session whose key ceiling runs out is told so with an error event naming what the session was billed, closed with 1008, and runs nothing more`, async (t) => {
    const gw = await startGateway(t, OPTS);
    const { key, account } = await gw.account('1', { spendLimit: CEILING, period: 'monthly' });
    const before = await balanceNano(gw, account);
    const s = await connect(`${gw.url.replace(/^http/, 'ws')}/alpha/v1/realtime?model=${model}`, { headers: { authorization: `Bearer ${key}` } });
    assert.ok(s.ws, JSON.stringify(s.refused));
    await s.until((e) => e.type === 'session.created');
    const { billed, responses, err, at } = await untilRefused(s, response);
    t.diagnostic(`${responses} responses billed ${billed} nd; then: ${err.error.message}`);
    assert.ok(responses >= 1, 'some responses ran before the ceiling was reached');
    assert.equal(err.error.code, 'key_spend_limit_reached');
    assert.equal(err.error.type, 'insufficient_quota');
    const said = /This session was billed \$([0-9.]+) \((\d+) nd\) in all\./.exec(err.error.message);
    assert.ok(said, `the error says what the session was billed: ${err.error.message}`);
    assert.equal(BigInt(said[2]), billed, 'what it says is what its responses cost');
    assert.equal(dollarsToNano(said[1]), billed);
    assert.equal((await s.closed).code, 1008);
    assert.ok(!s.frames.slice(at).some((e) => e.type === 'response.created' || e.type === 'response.output_text.delta'), 'nothing ran after the refusal');
    assert.equal(await spentBecomes(gw, account, before, billed), billed, 'billed exactly the responses that ran');
    await assertInvariants(assert, gw, account);
  });
}

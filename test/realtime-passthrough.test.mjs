// WS /alpha/v1/realtime on an upstream that speaks the realtime protocol itself (sim's /v1/realtime), raw `ws` client:
// frames relayed, the model name rewritten, each response.done billed at the model's token prices (audio and cached
// tokens at theirs), a dropped client's response billed what the upstream reports, an upstream that closes, a spent balance.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, assertInvariants, TEST_MODELS, balanceNano } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';
import { countTokens } from '../dist/meter/tokens.js';

const UPSTREAMS = { sim: { sim: {} }, rt: { sim: {}, realtime_api: true } };
/** Priced as OpenAI's gpt-realtime: $4 text in, $0.40 cached, $32 audio in, $16 text out, $64 audio out, per 1M tokens. */
const PASS = { id: 'sim-rt-pass', upstream: 'rt', upstream_model: 'sim-chat', kind: 'realtime', simulated: true, aliases: ['gpt-realtime'],
  input_per_mtok: '4', cached_input_per_mtok: '0.40', audio_input_per_mtok: '32', output_per_mtok: '16', audio_output_per_mtok: '64', max_output_tokens: 4096 };
const OPTS = { store: 'pglite', upstreams: UPSTREAMS, models: [...TEST_MODELS, PASS] };

/** The model's price of disjoint token counts (nanodollars per 1M tokens), rounded up once. */
function price({ text = 0, cached = 0, audioIn = 0, out = 0, audioOut = 0 }) {
  const num = BigInt(text) * 4_000_000_000n + BigInt(cached) * 400_000_000n + BigInt(audioIn) * 32_000_000_000n
    + BigInt(out) * 16_000_000_000n + BigInt(audioOut) * 64_000_000_000n;
  return num === 0n ? 0n : (num + 999_999n) / 1_000_000n;
}

/** A response.done usage block priced as the upstream reports it. */
function priceUsage(u) {
  const d = u.input_token_details ?? {};
  const cached = d.cached_tokens ?? 0;
  const audioIn = (d.audio_tokens ?? 0) - (d.cached_tokens_details?.audio_tokens ?? 0);
  const audioOut = u.output_token_details?.audio_tokens ?? 0;
  return price({ text: u.input_tokens - cached - audioIn, cached, audioIn, out: u.output_tokens - audioOut, audioOut });
}

function wsUrl(gw, model = 'sim-rt-pass', path = '/alpha/v1/realtime') {
  return `${gw.url.replace(/^http/, 'ws')}${path}?model=${model}`;
}

/** Waits until the spend reaches `want` (or, without one, until no hold is open and something is spent), returning the spend. */
async function spentBecomes(gw, account, before, want) {
  let spent = 0n;
  for (let i = 0; i < 100; i++) {
    const holds = /^tollgate_open_holds (\d+)/m.exec(await (await gw.fetch('/metrics')).text());
    spent = before - await balanceNano(gw, account);
    // A wanted amount: the session may still be open (its hold with it); none: wait for the session's end.
    if (want === undefined ? holds && Number(holds[1]) === 0 && spent > 0n : spent === want) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return spent;
}

/** The balance once no hold is open (a closed session has settled). */
async function spentSettled(gw, account) {
  for (let i = 0; i < 100; i++) {
    const holds = /^tollgate_open_holds (\d+)/m.exec(await (await gw.fetch('/metrics')).text());
    if (holds && Number(holds[1]) === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return balanceNano(gw, account);
}

const userText = (text) => ({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text }] } });

test('a text turn through the pass-through: frames relayed, the model named as the gateway names it, each response billed exactly its reported usage', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw, 'gpt-realtime', '/v1/realtime'), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  const created = await s.until((e) => e.type === 'session.created');
  assert.equal(created.session.model, 'sim-rt-pass', 'the upstream\'s model name (sim-chat) is rewritten');
  s.send({ type: 'session.update', session: { type: 'realtime', model: 'gpt-realtime', instructions: 'Answer briefly.' } });
  const updated = await s.until((e) => e.type === 'session.updated');
  assert.equal(updated.session.model, 'sim-rt-pass');
  assert.equal(updated.session.instructions, 'Answer briefly.');
  s.send(userText('Say hello to the realtime upstream.'));
  assert.equal((await s.until((e) => e.type === 'conversation.item.created')).item.content[0].text, 'Say hello to the realtime upstream.');
  s.send({ type: 'response.create' });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed');
  const deltas = s.events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.ok(deltas.length > 0);
  assert.equal(done.response.output[0].content[0].text, deltas);
  const u = done.response.usage;
  assert.ok(u.input_tokens > 0 && u.output_tokens > 0);
  s.send(userText('And again.'));
  s.send({ type: 'response.create' });
  const done2 = await s.until((e) => e.type === 'response.done' && e.response.id !== done.response.id);
  assert.ok(done2.response.usage.input_tokens > u.input_tokens, 'the upstream keeps the conversation');
  const expected = priceUsage(u) + priceUsage(done2.response.usage);
  assert.equal(await spentBecomes(gw, account, before, expected), expected, 'billed exactly what each response.done reported, at the model\'s prices');
  // Each response.done's usage carries its cost: dollars, exactly the part's debit.
  assert.equal(BigInt(Math.round(u.cost * 1e9)), priceUsage(u));
  assert.equal(BigInt(Math.round(done2.response.usage.cost * 1e9)), priceUsage(done2.response.usage));
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('audio and cached tokens the upstream reports are billed at their own prices', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  // The sim adds 7 audio tokens in and 11 out to its usage, and reports 5 input tokens as cached.
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}`, 'x-sim-audio-tokens': '7,11', 'x-sim-cached-tokens': '5' } });
  await s.until((e) => e.type === 'session.created');
  s.send(userText('Speak to me.'));
  s.send({ type: 'response.create' });
  const u = (await s.until((e) => e.type === 'response.done')).response.usage;
  assert.equal(u.input_token_details.audio_tokens, 7);
  assert.equal(u.output_token_details.audio_tokens, 11);
  assert.equal(u.input_token_details.cached_tokens, 5);
  const expected = price({ text: u.input_tokens - 5 - 7, cached: 5, audioIn: 7, out: u.output_tokens - 11, audioOut: 11 });
  // All tokens at the text prices would cost this much less: the audio tokens are dearer, the cached ones cheaper.
  assert.notEqual(expected, price({ text: u.input_tokens, out: u.output_tokens }));
  assert.equal(await spentBecomes(gw, account, before, expected), expected);
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('client events that would change billing unseen are refused with an error event and not passed on; the session goes on', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  await s.until((e) => e.type === 'session.created');
  const cases = [
    [{ type: 'session.update', event_id: 'ev_model', session: { type: 'realtime', model: 'sim-chat' } }, 'invalid_value', 'session.model'],
    [{ type: 'session.update', event_id: 'ev_tr', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } }, 'unsupported_parameter', 'session.audio.input.transcription'],
    [{ type: 'session.update', event_id: 'ev_tr2', session: { input_audio_transcription: { model: 'whisper-1' } } }, 'unsupported_parameter', 'session.input_audio_transcription'],
    [{ type: 'session.update', event_id: 'ev_type', session: { type: 'transcription' } }, 'unsupported_parameter', 'session.type'],
  ];
  for (const [ev, code, param] of cases) {
    const from = s.events.length;
    s.send(ev);
    const err = await s.until((e) => e.type === 'error', from);
    assert.equal(err.error.code, code);
    assert.equal(err.error.param, param);
    assert.equal(err.error.event_id, ev.event_id);
  }
  // Nothing reached the upstream: its session is as it was.
  s.send({ type: 'session.update', session: { type: 'realtime' } });
  const updated = await s.until((e) => e.type === 'session.updated');
  assert.equal(updated.session.model, 'sim-rt-pass');
  assert.equal(updated.session.audio.input.transcription, null);
  s.send('not json');
  assert.equal((await s.until((e) => e.type === 'error' && e.error.code === 'invalid_json')).error.type, 'invalid_request_error');
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('a client dropped mid-response: the response is cancelled upstream and billed exactly what the upstream reports for it', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const text = 'Tell me a long story about gateways.';
  // The sim is deterministic: the same conversation gets the same reply. First, the whole of it.
  const whole = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  await whole.until((e) => e.type === 'session.created');
  whole.send(userText(text));
  whole.send({ type: 'response.create' });
  const full = (await whole.until((e) => e.type === 'response.done')).response.usage.output_tokens;
  whole.ws.close();
  await whole.closed;
  const before = await spentSettled(gw, account);
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}`, 'x-sim-token-delay-ms': '60' } });
  await s.until((e) => e.type === 'session.created');
  s.send(userText(text));
  s.send({ type: 'response.create' });
  await s.until((e) => e.type === 'response.output_text.delta');
  await new Promise((r) => setTimeout(r, 100));
  s.ws.terminate();
  await s.closed;
  const seen = s.events.filter((e) => e.type === 'response.output_text.delta').length;
  assert.ok(seen < full - 3, `dropped well before the end (${seen} of ${full} tokens seen)`);
  const spent = await spentBecomes(gw, account, before);
  // The sim reports its chat prompt count (3 + 3 + the text's tokens) and the tokens it streamed before the cancel.
  const prompt = 6 + countTokens(text);
  const k = Array.from({ length: full - seen }, (_, i) => seen + i).find((n) => price({ text: prompt, out: n }) === spent);
  assert.ok(k !== undefined, `billed the cancelled response's reported usage: the prompt and fewer than the ${full} tokens of the whole reply (spent ${spent}, ${seen} deltas seen)`);
  await assertInvariants(assert, gw, account);
});

test('an upstream that closes mid-response: the client gets an error event and a 1011 close; the response is billed the prompt and the output its deltas showed', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const text = 'Tell me something long.';
  // The sim cuts its socket after 5 text deltas (no response.done).
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}`, 'x-sim-close-after': '5', 'x-sim-token-delay-ms': '5' } });
  await s.until((e) => e.type === 'session.created');
  s.send(userText(text));
  s.send({ type: 'response.create' });
  const err = await s.until((e) => e.type === 'error');
  assert.equal(err.error.code, 'upstream_closed');
  assert.equal(err.error.type, 'server_error');
  assert.equal((await s.closed).code, 1011);
  const deltas = s.events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta);
  assert.equal(deltas.length, 5);
  assert.ok(!s.events.some((e) => e.type === 'response.done'));
  // Tollgate's estimate: the client's text as the prompt, each delta's tokens as output.
  const expected = price({ text: countTokens(text), out: deltas.reduce((n, d) => n + countTokens(d), 0) });
  assert.equal(await spentBecomes(gw, account, before, expected), expected);
  await assertInvariants(assert, gw, account);
});

test('a session whose balance runs out gets an error event and a 1008 close, billed exactly the responses it got', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('0.000002');
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  await s.until((e) => e.type === 'session.created');
  let billed = 0n;
  let err = null;
  for (let i = 0; i < 40 && !err; i++) {
    const from = s.events.length;
    s.send({ type: 'response.create', response: { conversation: 'none', max_output_tokens: 300,
      input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: `Tell me a story, part ${i}.` }] }] } });
    const next = await s.until((e) => e.type === 'response.done' || e.type === 'error', from);
    if (next.type === 'response.done') billed += priceUsage(next.response.usage);
    else err = next;
  }
  assert.ok(err, 'the balance ran out within 40 responses');
  assert.equal(err.error.code, 'insufficient_balance');
  assert.match(err.error.message, new RegExp(`This session was billed \\$[0-9.]+ \\(${billed} nd\\) in all\\.$`), 'the error says what the session was billed');
  assert.equal((await s.closed).code, 1008);
  assert.ok(billed > 0n);
  assert.equal(await spentBecomes(gw, account, 2_000n, billed), billed, 'billed exactly the responses that ran, nothing for the refused one');
  await assertInvariants(assert, gw, account);
});

test('an upstream that refuses the session (an unknown upstream model) refuses the upgrade with an HTTP error; nothing is held or billed', async (t) => {
  const gw = await startGateway(t, { ...OPTS, models: [...TEST_MODELS, { ...PASS, id: 'sim-rt-missing', aliases: [], upstream_model: 'no-such-model' }] });
  const { key, account } = await gw.account('1');
  const s = await connect(wsUrl(gw, 'sim-rt-missing'), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.refused, 'no socket opens');
  assert.ok(s.refused.status >= 400, `status ${s.refused.status}`);
  assert.ok(s.refused.body.error, 'an OpenAI error envelope');
  assert.equal(await balanceNano(gw, account), 1_000_000_000n);
  await assertInvariants(assert, gw, account);
});

test('config: a pass-through model must price audio tokens; audio and cached token prices belong to pass-through models only', async () => {
  const { loadConfigFile } = await import('../dist/config.js');
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { join } = await import('node:path');
  const { tmpdir } = await import('node:os');
  const dir = mkdtempSync(join(tmpdir(), 'tg-rtpass-config-'));
  const load = (models) => {
    const path = join(dir, 'config.json');
    writeFileSync(path, JSON.stringify({ upstreams: UPSTREAMS, models, payments: { provider: 'sandbox', allow_sandbox: true } }));
    return loadConfigFile(path, {});
  };
  try {
    const c = load([PASS]);
    assert.equal(c.models[0].passthrough, true);
    assert.equal(c.models[0].prices.audioInputPerMTok, 32_000_000_000n);
    assert.equal(c.models[0].prices.cachedInputPerMTok, 400_000_000n);
    const { audio_output_per_mtok: _omit, ...noAudioOut } = PASS;
    assert.throws(() => load([noAudioOut]), /audio_output_per_mtok/);
    // The cascade's realtime model (not on a realtime_api upstream) keeps its audio-minute price and takes no token audio prices.
    assert.throws(() => load([{ ...PASS, upstream: 'sim' }]), /audio_input_per_mtok|audio_in_per_minute/);
    assert.throws(() => load([{ id: 'c', upstream: 'sim', kind: 'chat', input_per_mtok: '1', output_per_mtok: '1', cached_input_per_mtok: '0.1' }]), /cached_input_per_mtok/);
    const { cached_input_per_mtok: _c, ...noCached } = PASS;
    assert.equal(load([noCached]).models[0].prices.cachedInputPerMTok, 4_000_000_000n, 'cached input defaults to the input price');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

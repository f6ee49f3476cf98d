// WS /alpha/v1/realtime with a raw `ws` client: text turns billed exactly per response, session.update
// validation, malformed events, the subprotocol key, the session's concurrency slot, a drop mid-response.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startGateway, assertInvariants, priceNano, TEST_MODELS, bearer, chatBody, freshDatabase, clearRedisPrefix, balanceNano } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';

const OPTS = { store: 'pglite' };
/** PostgreSQL and the Redis limiter: the migration, the session's slot and its parts settled through Redis. */
const SHARED = { store: 'postgres', redis: true };

function wsUrl(gw, path = '/alpha/v1/realtime', model = 'sim-chat') {
  return `${gw.url.replace(/^http/, 'ws')}${path}${model ? `?model=${model}` : ''}`;
}

/** Waits for the ledger to show `spent` (debits are committed just after they are made durable). */
async function spentBecomes(gw, account, before, spent) {
  let now = await balanceNano(gw, account);
  for (let i = 0; i < 60 && before - now !== spent; i++) { await new Promise((x) => setTimeout(x, 50)); now = await balanceNano(gw, account); }
  return before - now;
}

/** A text reply (sessions start with audio out, as OpenAI's do). */
const TEXT = { output_modalities: ['text'] };

const userText = (text) => ({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text }] } });

test('a text turn: item created, the reply streamed as output_text deltas, response.done with usage, billed exactly that usage', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  const created = await s.until((e) => e.type === 'session.created');
  assert.equal(created.session.model, 'sim-chat');
  s.send(userText('Say hello to the realtime gateway.'));
  const item = await s.until((e) => e.type === 'conversation.item.created');
  assert.equal(item.item.role, 'user');
  assert.equal(item.item.content[0].text, 'Say hello to the realtime gateway.');
  s.send({ type: 'response.create', response: TEXT });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed');
  const types = s.events.map((e) => e.type);
  assert.ok(types.indexOf('response.created') < types.indexOf('response.output_text.delta'));
  const deltas = s.events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  const textDone = s.events.find((e) => e.type === 'response.output_text.done');
  assert.ok(deltas.length > 0);
  assert.equal(textDone.text, deltas);
  assert.equal(done.response.output[0].content[0].text, deltas);
  const u = done.response.usage;
  assert.ok(u.input_tokens > 0 && u.output_tokens > 0);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  // A second turn sees the first: its prompt is longer, and it is billed too.
  s.send(userText('And again.'));
  s.send({ type: 'response.create', response: TEXT });
  const done2 = await s.until((e) => e.type === 'response.done' && e.response.id !== done.response.id);
  assert.ok(done2.response.usage.input_tokens > u.input_tokens, 'the conversation carries the first turn');
  const expected = priceNano(u.input_tokens, u.output_tokens) + priceNano(done2.response.usage.input_tokens, done2.response.usage.output_tokens);
  assert.equal(await spentBecomes(gw, account, before, expected), expected, 'billed exactly each response\'s usage at the model\'s price');
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('session.update with pcmu (GA), g711_ulaw (beta) or semantic_vad is an error event naming the field, and the session keeps its configuration', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const s = await connect(wsUrl(gw, '/v1/realtime'), { headers: { authorization: `Bearer ${key}` } });
  await s.until((e) => e.type === 'session.created');
  s.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Be brief.' } });
  const ok = await s.until((e) => e.type === 'session.updated');
  assert.equal(ok.session.instructions, 'Be brief.');
  s.send({ type: 'session.update', event_id: 'evt_pcmu', session: { type: 'realtime', instructions: 'Changed?', audio: { input: { format: { type: 'audio/pcmu' } } } } });
  const err = await s.until((e) => e.type === 'error');
  assert.equal(err.error.type, 'invalid_request_error');
  assert.equal(err.error.code, 'unsupported_parameter');
  assert.equal(err.error.param, 'session.audio.input.format');
  assert.equal(err.error.event_id, 'evt_pcmu');
  const n = s.events.length;
  s.send({ type: 'session.update', session: { input_audio_format: 'g711_ulaw' } });
  const err2 = await s.until((e) => e.type === 'error', n);
  assert.equal(err2.error.param, 'session.input_audio_format');
  const n2 = s.events.length;
  s.send({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: { type: 'semantic_vad' } } } } });
  const err3 = await s.until((e) => e.type === 'error', n2);
  assert.equal(err3.error.param, 'session.audio.input.turn_detection.type');
  const n3 = s.events.length;
  s.send({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: null } } } });
  const kept = await s.until((e) => e.type === 'session.updated', n3);
  assert.equal(kept.session.instructions, 'Be brief.', 'the rejected updates changed nothing');
  assert.deepEqual(kept.session.audio.input.format, { type: 'audio/pcm', rate: 24000 });
  assert.equal(kept.session.audio.input.turn_detection, null);
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('a malformed frame and an unknown event get error events; the session goes on', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key } = await gw.account('1');
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  await s.until((e) => e.type === 'session.created');
  s.ws.send('{"type": "session.upd');
  const e1 = await s.until((e) => e.type === 'error');
  assert.equal(e1.error.type, 'invalid_request_error');
  assert.equal(e1.error.code, 'invalid_json');
  s.send({ type: 'no.such.event' });
  const e2 = await s.until((e) => e.type === 'error' && e.error.code === 'invalid_event');
  assert.match(e2.error.message, /no\.such\.event/);
  s.send({ type: 'session.update', session: { instructions: 'still here' } });
  assert.equal((await s.until((e) => e.type === 'session.updated')).session.instructions, 'still here');
  s.ws.close();
});

test('the key in the browser subprotocol (openai-insecure-api-key.<KEY>, alpha-insecure-api-key.<KEY>); the server answers "realtime"; a bad key or scope is an HTTP refusal in the alpha envelope', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  for (const prefix of ['openai-insecure-api-key.', 'alpha-insecure-api-key.']) {
    const s = await connect(wsUrl(gw), { protocols: ['realtime', `${prefix}${key}`] });
    assert.ok(s.ws, JSON.stringify(s.refused));
    assert.equal(s.ws.protocol, 'realtime');
    await s.until((e) => e.type === 'session.created');
    s.ws.close();
    await s.closed;
  }
  const bad = await connect(wsUrl(gw), { protocols: ['realtime', 'openai-insecure-api-key.svc_live_notarealkeyatall0000000000000000000'] });
  assert.equal(bad.refused?.status, 401);
  assert.equal(bad.refused.body.error.code, 'invalid_api_key');
  const { key: voiceOnly } = await gw.account('1', { scopes: 'voice' });
  const scoped = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${voiceOnly}` } });
  assert.equal(scoped.refused?.status, 403);
  const noModel = await connect(wsUrl(gw, '/alpha/v1/realtime', 'sim-tts'), { headers: { authorization: `Bearer ${key}` } });
  assert.equal(noModel.refused?.status >= 400, true, 'a model that is not a chat model is refused at the upgrade');
  await assertInvariants(assert, gw, account);
});

test('a session holds one concurrency slot for its life, counted across instances (two gateways on one PostgreSQL + Redis): a second one is refused with 429 on the other instance until the first closes', async (t) => {
  const db = await freshDatabase();
  const redisPrefix = `tgtest:${randomBytes(5).toString('hex')}:`;
  t.after(async () => { await db.drop(); await clearRedisPrefix(redisPrefix); });
  const gw = await startGateway(t, { ...SHARED, database: db, redisPrefix });
  const other = await startGateway(t, { ...SHARED, database: db, redisPrefix });
  const { key, account } = await gw.account('1', { concurrency: 1 });
  const first = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(first.ws);
  const second = await connect(wsUrl(other), { headers: { authorization: `Bearer ${key}` } });
  assert.equal(second.refused?.status, 429, 'the other instance sees the slot taken');
  assert.equal(second.refused.body.error.code, 'concurrency_limit_exceeded');
  const streamInput = await connect(`${other.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/stream-input?model_id=sim-tts`, { headers: { 'xi-api-key': key } });
  assert.equal(streamInput.refused?.status, 429, 'a stream-input session on the other instance is refused too');
  first.ws.close();
  await first.closed;
  let third;
  for (let i = 0; i < 40; i++) {
    third = await connect(wsUrl(other), { headers: { authorization: `Bearer ${key}` } });
    if (third.ws) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(third.ws, 'the slot was freed at the close');
  third.ws.close();
  await third.closed;
  await assertInvariants(assert, gw, account);
});

test('a socket dropped mid-response is billed for the prompt and the output produced, and no more (PostgreSQL + Redis)', async (t) => {
  const gw = await startGateway(t, SHARED);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  // The sim streams a token every 40 ms (its test control, forwarded from the upgrade's headers).
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}`, 'x-sim-token-delay-ms': '40' } });
  await s.until((e) => e.type === 'session.created');
  s.send(userText('Tell me a long story about gateways.'));
  s.send({ type: 'response.create', response: { ...TEXT, max_output_tokens: 400 } });
  await s.until((e) => e.type === 'response.output_text.delta');
  await new Promise((r) => setTimeout(r, 200));
  s.ws.terminate();
  await s.closed;
  // The session settles what it produced, then frees its hold.
  let spent = 0n;
  for (let i = 0; i < 100; i++) {
    const holds = /^tollgate_open_holds (\d+)/m.exec(await (await gw.fetch('/metrics')).text());
    if (holds && Number(holds[1]) === 0) { spent = before - await balanceNano(gw, account); if (spent > 0n) break; }
    await new Promise((r) => setTimeout(r, 50));
  }
  const seen = s.events.filter((e) => e.type === 'response.output_text.delta').length;
  assert.ok(spent >= priceNano(1, seen), `what was produced is billed (${seen} deltas seen)`);
  assert.ok(spent < priceNano(200, 400), 'less than the whole response would have cost');
  await assertInvariants(assert, gw, account);
});

test('response.cancel stops the response: status cancelled, billed for what was produced', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}`, 'x-sim-token-delay-ms': '40' } });
  await s.until((e) => e.type === 'session.created');
  s.send(userText('Tell me a long story about gateways.'));
  s.send({ type: 'response.create', response: { ...TEXT, max_output_tokens: 400 } });
  await s.until((e) => e.type === 'response.output_text.delta');
  s.send({ type: 'response.cancel' });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'cancelled');
  assert.equal(done.response.status_details.reason, 'client_cancelled');
  const u = done.response.usage;
  assert.ok(u.output_tokens > 0 && u.output_tokens < 400);
  const expected = priceNano(u.input_tokens, u.output_tokens);
  assert.equal(await spentBecomes(gw, account, before, expected), expected);
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

/** Mints a client secret with `key`; returns the parsed reply (and the status). */
async function mint(gw, key, body, path = '/alpha/v1/realtime/client_secrets') {
  const r = await gw.fetch(path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

test('an ephemeral client secret opens a session from the browser subprotocol, with the configuration it was minted with, billed to its parent key; it opens nothing else', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const m = await mint(gw, key, { session: { type: 'realtime', model: 'sim-chat', instructions: 'Minted instructions.', output_modalities: ['text'] } });
  assert.equal(m.status, 200, JSON.stringify(m.body));
  assert.match(m.body.value, /^ek_/);
  const now = Math.floor(Date.now() / 1000);
  assert.ok(m.body.expires_at > now + 590 && m.body.expires_at <= now + 601, 'ten minutes by default');
  assert.equal(m.body.session.instructions, 'Minted instructions.');
  // The model comes from the secret: no ?model= needed.
  const s = await connect(wsUrl(gw, '/alpha/v1/realtime', null), { protocols: ['realtime', `openai-insecure-api-key.${m.body.value}`] });
  assert.ok(s.ws, JSON.stringify(s.refused));
  const created = await s.until((e) => e.type === 'session.created');
  assert.equal(created.session.instructions, 'Minted instructions.');
  assert.equal(created.session.model, 'sim-chat');
  assert.deepEqual(created.session.output_modalities, ['text'], 'as minted');
  s.send(userText('Hello from a browser.'));
  s.send({ type: 'response.create' });
  const done = await s.until((e) => e.type === 'response.done');
  const u = done.response.usage;
  const expected = priceNano(u.input_tokens, u.output_tokens);
  assert.equal(await spentBecomes(gw, account, before, expected), expected, 'billed to the parent key\'s account');
  s.ws.close();
  await s.closed;
  // The secret is no API key: an HTTP route refuses it.
  const chat = await gw.fetch('/alpha/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${m.body.value}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }] }) });
  assert.equal(chat.status, 401);
  // A session configuration the realtime route would refuse is refused at minting, in the alpha envelope.
  const bad = await mint(gw, key, { session: { type: 'realtime', audio: { output: { format: { type: 'audio/pcma' } } } } });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'session.audio.output.format');
  const older = await mint(gw, key, { model: 'sim-chat', instructions: 'beta shape' }, '/alpha/v1/realtime/sessions');
  assert.equal(older.status, 200, JSON.stringify(older.body));
  assert.match(older.body.client_secret.value, /^ek_/);
  const s2 = await connect(wsUrl(gw, '/v1/realtime', 'sim-chat'), { headers: { authorization: `Bearer ${older.body.client_secret.value}` } });
  assert.ok(s2.ws, JSON.stringify(s2.refused));
  assert.equal((await s2.until((e) => e.type === 'session.created')).session.instructions, 'beta shape');
  s2.ws.close();
  await s2.closed;
  await assertInvariants(assert, gw, account);
});

test('an expired client secret, an unknown one, and one whose parent key was revoked are refused with 401 at the upgrade (PostgreSQL + Redis)', async (t) => {
  const gw = await startGateway(t, SHARED);
  const { key, prefix, account } = await gw.account('1');
  const short = await mint(gw, key, { expires_after: { anchor: 'created_at', seconds: 10 }, session: { type: 'realtime', model: 'sim-chat' } });
  assert.equal(short.status, 200, JSON.stringify(short.body));
  const tooShort = await mint(gw, key, { expires_after: { anchor: 'created_at', seconds: 5 } });
  assert.equal(tooShort.status, 422, 'at least 10 seconds, as the family allows (a schema error, as every route has it)');
  const long = await mint(gw, key, { session: { type: 'realtime', model: 'sim-chat' } });
  const unknown = await connect(wsUrl(gw), { protocols: ['realtime', 'openai-insecure-api-key.ek_nosuchsecret000000000000000000000000000'] });
  assert.equal(unknown.refused?.status, 401);
  assert.equal(unknown.refused.body.error.code, 'invalid_api_key');
  // Past its expiry (10 s), the secret opens nothing.
  await new Promise((r) => setTimeout(r, 11_000));
  const expired = await connect(wsUrl(gw), { protocols: ['realtime', `openai-insecure-api-key.${short.body.value}`] });
  assert.equal(expired.refused?.status, 401);
  assert.match(expired.refused.body.error.message, /expired/);
  // The long one works, until its parent key is revoked.
  const ok = await connect(wsUrl(gw), { protocols: ['realtime', `openai-insecure-api-key.${long.body.value}`] });
  assert.ok(ok.ws, JSON.stringify(ok.refused));
  ok.ws.close();
  await ok.closed;
  await gw.cli('key', 'revoke', prefix);
  let refused;
  for (let i = 0; i < 40; i++) {
    const r = await connect(wsUrl(gw), { protocols: ['realtime', `openai-insecure-api-key.${long.body.value}`] });
    if (r.refused) { refused = r.refused; break; }
    r.ws.close();
    await r.closed;
    await new Promise((x) => setTimeout(x, 100));
  }
  assert.equal(refused?.status, 401);
  assert.match(refused.body.error.message, /revoked/);
  await assertInvariants(assert, gw, account);
});

test('a model of kind realtime runs its text turns on its upstream_model (a chat model there), at its own token prices', async (t) => {
  const models = [...TEST_MODELS, { id: 'sim-realtime', upstream: 'sim', upstream_model: 'sim-chat', kind: 'realtime', simulated: true, aliases: ['gpt-realtime'],
    input_per_mtok: '1.00', output_per_mtok: '4.00', audio_in_per_minute: '0.06', max_output_tokens: 4096 }];
  const gw = await startGateway(t, { ...OPTS, models });
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw, '/v1/realtime', 'gpt-realtime'), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  assert.equal((await s.until((e) => e.type === 'session.created')).session.model, 'sim-realtime');
  s.send(userText('Hello, realtime model.'));
  s.send({ type: 'response.create', response: TEXT });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed');
  const u = done.response.usage;
  const expected = priceNano(u.input_tokens, u.output_tokens, 1_000_000_000n, 4_000_000_000n);
  assert.equal(await spentBecomes(gw, account, before, expected), expected);
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('a session whose balance runs out is told with an error event and closed with 1008, billed exactly the responses it got', async (t) => {
  const gw = await startGateway(t, OPTS);
  // 1,000 nanodollars: a few responses (admission needs the balance above what is held; each response holds, then settles).
  const { key, account } = await gw.account('0.000001');
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  await s.until((e) => e.type === 'session.created');
  let billed = 0n;
  let err = null;
  for (let i = 0; i < 40 && !err; i++) {
    const from = s.events.length;
    s.send({ type: 'response.create', response: { ...TEXT, conversation: 'none', max_output_tokens: 300,
      input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: `Tell me a long story, part ${i}.` }] }] } });
    const done = await s.until((e) => e.type === 'response.done', from);
    if (done.response.status === 'completed') billed += priceNano(done.response.usage.input_tokens, done.response.usage.output_tokens);
    else err = await s.until((e) => e.type === 'error', from);
  }
  assert.ok(err, 'the balance ran out within 40 responses');
  assert.equal(err.error.code, 'insufficient_balance');
  assert.match(err.error.message, new RegExp(`This session was billed \\$[0-9.]+ \\(${billed} nd\\) in all\\.$`), 'the error says what the session was billed');
  assert.equal((await s.closed).code, 1008);
  assert.ok(billed > 0n);
  assert.equal(await spentBecomes(gw, account, 1_000n, billed), billed, 'billed exactly the responses that ran, nothing for the refused one');
  await assertInvariants(assert, gw, account);
});

/** PCM16 at 24 kHz as base64 appends of 100 ms each. */
function appends(samples) {
  const bytes = Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
  const out = [];
  for (let i = 0; i < bytes.length; i += 4800) out.push({ type: 'input_audio_buffer.append', audio: bytes.subarray(i, i + 4800).toString('base64') });
  return out;
}

const SIM_STT_ND_PER_MS = 100n; // sim-stt: $0.006 a minute
const SIM_TTS_ND_PER_CHAR = 15_000n; // sim-tts: $15 a million characters

test('an audio turn: server VAD hears the speech, the turn is transcribed, the reply is spoken as PCM with its transcript; billed audio minutes in, tokens and characters out', async (t) => {
  const { synth } = await import('../dist/sim/speech.js');
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  await s.until((e) => e.type === 'session.created');
  s.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['audio'], audio: { input: { transcription: { model: 'whisper-1' } }, output: { voice: 'verse' } } } });
  const updated = await s.until((e) => e.type === 'session.updated');
  assert.deepEqual(updated.session.output_modalities, ['audio']);
  // sim's speech carries its text, so sim's transcription hears exactly what was said.
  const said = 'What is the capital of France?';
  const speech = synth(said);
  for (const e of appends(speech)) s.send(e);
  for (const e of appends(new Int16Array(24_000))) s.send(e); // a second of silence ends the turn
  const started = await s.until((e) => e.type === 'input_audio_buffer.speech_started');
  assert.equal(started.audio_start_ms, 0);
  const stopped = await s.until((e) => e.type === 'input_audio_buffer.speech_stopped');
  assert.equal(stopped.item_id, started.item_id);
  // The turn ends after 500 ms of silence (the default silence_duration_ms): within a frame of it.
  const speechMs = (speech.length / 24);
  assert.ok(stopped.audio_end_ms >= speechMs + 500 - 60 && stopped.audio_end_ms <= speechMs + 500 + 20, `speech ${speechMs} ms, stopped at ${stopped.audio_end_ms} ms`);
  const committed = await s.until((e) => e.type === 'input_audio_buffer.committed');
  assert.equal(committed.item_id, started.item_id);
  const added = await s.until((e) => e.type === 'conversation.item.added');
  assert.deepEqual(added.item.content, [{ type: 'input_audio', transcript: null }]);
  const heard = await s.until((e) => e.type === 'conversation.item.input_audio_transcription.completed');
  assert.equal(heard.transcript, said);
  assert.equal(heard.usage.type, 'duration');
  assert.equal(heard.usage.seconds * 1000, stopped.audio_end_ms - started.audio_start_ms);
  // server_vad's create_response: the reply comes without a response.create.
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed', JSON.stringify(done.response.status_details));
  assert.deepEqual(done.response.output_modalities, ['audio']);
  const transcript = s.events.filter((e) => e.type === 'response.output_audio_transcript.delta').map((e) => e.delta).join('');
  assert.ok(transcript.length > 0);
  assert.equal(s.events.filter((e) => e.type === 'response.output_text.delta').length, 0, 'audio output carries its text as a transcript');
  assert.equal(s.events.find((e) => e.type === 'response.output_audio_transcript.done').transcript, transcript);
  assert.deepEqual(done.response.output[0].content, [{ type: 'output_audio', transcript }]);
  const audio = Buffer.concat(s.events.filter((e) => e.type === 'response.output_audio.delta').map((e) => Buffer.from(e.delta, 'base64')));
  // sim speaks 60 ms a character at 24 kHz: the audio is the transcript spoken.
  assert.equal(audio.length, [...transcript].length * 60 * 48);
  assert.ok(s.events.findIndex((e) => e.type === 'response.output_audio.done') < s.events.indexOf(done));
  const u = done.response.usage;
  const expected = BigInt(heard.usage.seconds * 1000) * SIM_STT_ND_PER_MS + priceNano(u.input_tokens, u.output_tokens) + BigInt([...transcript].length) * SIM_TTS_ND_PER_CHAR;
  assert.equal(await spentBecomes(gw, account, before, expected), expected, 'billed the audio in, the tokens and the characters spoken, each at its price');
  // The next turn's prompt holds the first exchange (the user's transcript and the spoken reply).
  s.send(userText('And Germany?'));
  s.send({ type: 'response.create', response: { output_modalities: ['text'] } });
  const done2 = await s.until((e) => e.type === 'response.done' && e.response.id !== done.response.id);
  assert.equal(done2.response.status, 'completed');
  assert.ok(done2.response.usage.input_tokens > u.input_tokens + 5);
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('manual turns: with turn_detection null a commit makes the turn and no reply; too little audio is input_audio_buffer_commit_empty; clear empties the buffer', async (t) => {
  const { synth } = await import('../dist/sim/speech.js');
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  await s.until((e) => e.type === 'session.created');
  s.send({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: null } } } });
  await s.until((e) => e.type === 'session.updated');
  s.send(appends(new Int16Array(24 * 50))[0]);
  s.send({ type: 'input_audio_buffer.commit', event_id: 'evt_short' });
  const err = await s.until((e) => e.type === 'error');
  assert.equal(err.error.code, 'input_audio_buffer_commit_empty');
  assert.equal(err.error.event_id, 'evt_short');
  s.send({ type: 'input_audio_buffer.clear' });
  await s.until((e) => e.type === 'input_audio_buffer.cleared');
  const said = 'Hello there.';
  const speech = synth(said);
  for (const e of appends(speech)) s.send(e);
  s.send({ type: 'input_audio_buffer.commit' });
  const committed = await s.until((e) => e.type === 'input_audio_buffer.committed');
  const heard = await s.until((e) => e.type === 'conversation.item.input_audio_transcription.completed');
  assert.equal(heard.item_id, committed.item_id);
  assert.equal(heard.transcript, said, 'the cleared 50 ms are not in the turn');
  assert.equal(heard.usage.seconds * 1000, speech.length / 24);
  assert.equal(s.events.filter((e) => e.type === 'input_audio_buffer.speech_started').length, 0, 'no VAD events with turn_detection null');
  s.send({ type: 'conversation.item.retrieve', item_id: committed.item_id });
  const got = await s.until((e) => e.type === 'conversation.item.retrieved');
  assert.deepEqual(got.item.content, [{ type: 'input_audio', transcript: said }]);
  assert.equal(s.events.filter((e) => e.type === 'response.created').length, 0, 'a manual commit asks for no reply');
  const expected = BigInt(speech.length / 24) * SIM_STT_ND_PER_MS;
  assert.equal(await spentBecomes(gw, account, before, expected), expected, 'billed the committed audio only');
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('a turn whose transcription fails bills nothing and gives back what was held for it: the balance it held is free again while the session lives', async (t) => {
  const gw = await startGateway(t, OPTS);
  // 100,000 nd: two seconds of audio in (200,000 nd held) would leave nothing for anything else.
  const { key, account } = await gw.account('0.0001');
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}`, 'x-sim-fail-status': '500' } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  await s.until((e) => e.type === 'session.created');
  s.send({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: null } } } });
  await s.until((e) => e.type === 'session.updated');
  for (const e of appends(new Int16Array(48_000).fill(3000))) s.send(e);
  s.send({ type: 'input_audio_buffer.commit' });
  const committed = await s.until((e) => e.type === 'input_audio_buffer.committed');
  const failed = await s.until((e) => e.type === 'conversation.item.input_audio_transcription.failed');
  assert.equal(failed.item_id, committed.item_id);
  assert.equal(typeof failed.error.message, 'string');
  // The session is still open: a request beside it is admitted, so nothing is held for the failed turn.
  const before = await balanceNano(gw, account);
  const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody({ max_tokens: 4 }) });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  const { usage } = JSON.parse(text);
  const chat = priceNano(usage.prompt_tokens, usage.completion_tokens);
  assert.equal(await spentBecomes(gw, account, before, chat), chat, 'only the chat request is billed: the failed turn cost nothing');
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('response.create refuses what it would not act on (an unknown field, a stored prompt, an unknown audio.output field) with an error naming it, and runs nothing', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  await s.until((e) => e.type === 'session.created');
  s.send(userText('Hello.'));
  await s.until((e) => e.type === 'conversation.item.created');
  const cases = [
    [{ reasoning: { effort: 'high' } }, 'unknown_parameter', 'response.reasoning'],
    [{ prompt: { id: 'pmpt_1' } }, 'unsupported_parameter', 'response.prompt'],
    [{ audio: { output: { voice: 'alloy', speed: 2 } } }, 'unknown_parameter', 'response.audio.output.speed'],
    [{ output_modalities: ['audio'], audio: { output: { voice: 'nobody' } } }, 'invalid_value', 'response.audio.output.voice'],
  ];
  for (const [response, code, param] of cases) {
    const from = s.events.length;
    s.send({ type: 'response.create', event_id: `evt_${code}`, response });
    const err = await s.until((e) => e.type === 'error', from);
    assert.equal(err.error.code, code, JSON.stringify(err));
    assert.equal(err.error.param, param);
  }
  assert.equal(s.events.filter((e) => e.type === 'response.created').length, 0, 'no response ran');
  s.send({ type: 'response.create', response: { ...TEXT, prompt: null, metadata: { topic: 'x' } } });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed');
  assert.deepEqual(done.response.metadata, { topic: 'x' });
  const u = done.response.usage;
  const expected = priceNano(u.input_tokens, u.output_tokens);
  assert.equal(await spentBecomes(gw, account, before, expected), expected);
  s.ws.close();
  await s.closed;
});

test('an input_audio part in conversation.item.create is transcribed (billed by its duration) and the reply answers its transcript; audio in other places is refused', async (t) => {
  const { synth } = await import('../dist/sim/speech.js');
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  await s.until((e) => e.type === 'session.created');
  const said = 'Where is the nearest train station?';
  const speech = synth(said);
  const audio = Buffer.from(speech.buffer, speech.byteOffset, speech.byteLength).toString('base64');
  s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_audio', audio }] } });
  const created = await s.until((e) => e.type === 'conversation.item.created');
  assert.deepEqual(created.item.content, [{ type: 'input_audio', transcript: null }], 'the audio itself is not echoed');
  s.send({ type: 'response.create', response: { output_modalities: ['text'] } });
  const heard = await s.until((e) => e.type === 'conversation.item.input_audio_transcription.completed');
  assert.equal(heard.item_id, created.item.id);
  assert.equal(heard.content_index, 0);
  assert.equal(heard.transcript, said);
  assert.deepEqual(heard.usage, { type: 'duration', seconds: speech.length / 24_000 });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed');
  // The response was queued behind the transcription: its prompt is the transcript, token for token.
  const { chatPromptTokens } = await import('../dist/meter/tokens.js');
  assert.equal(done.response.usage.input_tokens, chatPromptTokens([{ role: 'user', content: said }]));
  s.send({ type: 'conversation.item.retrieve', item_id: created.item.id });
  assert.deepEqual((await s.until((e) => e.type === 'conversation.item.retrieved')).item.content, [{ type: 'input_audio', transcript: said }]);
  const u = done.response.usage;
  const expected = BigInt(speech.length / 24) * SIM_STT_ND_PER_MS + priceNano(u.input_tokens, u.output_tokens);
  assert.equal(await spentBecomes(gw, account, before, expected), expected, 'billed the audio\'s duration and the response\'s tokens');
  const refusals = [
    [{ type: 'message', role: 'assistant', content: [{ type: 'input_audio', audio }] }, 'unsupported_parameter', 'item.content[0].type'],
    [{ type: 'message', role: 'user', content: [{ type: 'input_audio', audio: '' }] }, 'invalid_value', 'item.content[0].audio'],
    [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }, { type: 'input_audio', audio: 'AAAA' }] }, 'invalid_value', 'item.content[1].audio'],
  ];
  for (const [item, code, param] of refusals) {
    const from = s.events.length;
    s.send({ type: 'conversation.item.create', item });
    const err = await s.until((e) => e.type === 'error', from);
    assert.equal(err.error.code, code, JSON.stringify(err));
    assert.equal(err.error.param, param);
  }
  const from = s.events.length;
  s.send({ type: 'response.create', response: { conversation: 'none', input: [{ type: 'message', role: 'user', content: [{ type: 'input_audio', audio }] }] } });
  assert.equal((await s.until((e) => e.type === 'error', from)).error.param, 'response.input[0].content[0].type', 'out-of-band input takes text only');
  assert.equal(await spentBecomes(gw, account, before, expected), expected, 'nothing refused was billed');
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

/** What the user heard of `text` spoken at sim's 60 ms a character, cut at `ms`: whole words only. */
function heardAt(text, ms) {
  const chars = [...text];
  let n = Math.min(chars.length, Math.floor(ms / 60));
  if (n < chars.length && !/\s/.test(chars[n])) while (n > 0 && !/\s/.test(chars[n - 1])) n--;
  return chars.slice(0, n).join('').trimEnd();
}

test('conversation.item.truncate cuts a spoken reply to what was heard: conversation.item.truncated, the item\'s transcript and the next prompt hold only the words heard', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  await s.until((e) => e.type === 'session.created');
  s.send(userText('Tell me about the weather.'));
  s.send({ type: 'response.create', response: { output_modalities: ['audio'], max_output_tokens: 40 } });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed');
  const item = done.response.output[0];
  const transcript = item.content[0].transcript;
  const audioMs = Buffer.concat(s.events.filter((e) => e.type === 'response.output_audio.delta').map((e) => Buffer.from(e.delta, 'base64'))).length / 48;
  assert.equal(audioMs, [...transcript].length * 60);
  // Errors first: past the audio's end, a user item, a bad content_index; none changes the item.
  for (const [ev, param] of [
    [{ item_id: item.id, content_index: 0, audio_end_ms: audioMs + 1 }, 'audio_end_ms'],
    [{ item_id: s.events.find((e) => e.type === 'conversation.item.created').item.id, content_index: 0, audio_end_ms: 0 }, 'item_id'],
    [{ item_id: item.id, content_index: 1, audio_end_ms: 10 }, 'content_index'],
    [{ item_id: 'item_nope', content_index: 0, audio_end_ms: 10 }, 'item_id'],
  ]) {
    const from = s.events.length;
    s.send({ type: 'conversation.item.truncate', ...ev });
    const err = await s.until((e) => e.type === 'error', from);
    assert.equal(err.error.code, 'invalid_value');
    assert.equal(err.error.param, param);
  }
  const cut = Math.floor(audioMs / 2) + 30;
  s.send({ type: 'conversation.item.truncate', event_id: 'evt_cut', item_id: item.id, content_index: 0, audio_end_ms: cut });
  const truncated = await s.until((e) => e.type === 'conversation.item.truncated');
  assert.deepEqual({ item_id: truncated.item_id, content_index: truncated.content_index, audio_end_ms: truncated.audio_end_ms }, { item_id: item.id, content_index: 0, audio_end_ms: cut });
  const heard = heardAt(transcript, cut);
  assert.ok(heard.length > 0 && heard.length < transcript.length && transcript.startsWith(heard), `${heard} | ${transcript}`);
  s.send({ type: 'conversation.item.retrieve', item_id: item.id });
  assert.deepEqual((await s.until((e) => e.type === 'conversation.item.retrieved')).item.content, [{ type: 'output_audio', transcript: heard }]);
  const n = s.events.length;
  s.send({ type: 'response.create', response: { output_modalities: ['text'] } });
  const next = await s.until((e) => e.type === 'response.done', n);
  const { chatPromptTokens } = await import('../dist/meter/tokens.js');
  assert.equal(next.response.usage.input_tokens, chatPromptTokens([{ role: 'user', content: 'Tell me about the weather.' }, { role: 'assistant', content: heard }]),
    'the model sees only what was heard');
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('sessions start with audio out, as OpenAI\'s do: session.created shows output_modalities ["audio"] and a plain response.create is spoken (billed its characters); a secret minted without modalities too; with no speech model configured, text', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  const created = await s.until((e) => e.type === 'session.created');
  assert.deepEqual(created.session.output_modalities, ['audio']);
  assert.deepEqual(created.session.audio.output, { format: { type: 'audio/pcm', rate: 24000 }, voice: 'alloy', speed: 1 });
  s.send(userText('Hello.'));
  s.send({ type: 'response.create', response: { max_output_tokens: 20 } });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed');
  assert.deepEqual(done.response.output_modalities, ['audio']);
  const transcript = done.response.output[0].content[0].transcript;
  assert.ok(transcript.length > 0);
  const audio = Buffer.concat(s.events.filter((e) => e.type === 'response.output_audio.delta').map((e) => Buffer.from(e.delta, 'base64')));
  assert.equal(audio.length, [...transcript].length * 60 * 48);
  const u = done.response.usage;
  const expected = priceNano(u.input_tokens, u.output_tokens) + BigInt([...transcript].length) * SIM_TTS_ND_PER_CHAR;
  assert.equal(await spentBecomes(gw, account, before, expected), expected);
  s.ws.close();
  await s.closed;
  const m = await mint(gw, key, { session: { type: 'realtime', model: 'sim-chat' } });
  assert.equal(m.status, 200, JSON.stringify(m.body));
  assert.deepEqual(m.body.session.output_modalities, ['audio']);
  const minted = await mint(gw, key, { session: { type: 'realtime', model: 'sim-chat', output_modalities: ['audio'] } });
  assert.equal(minted.status, 200, 'a secret may ask for audio where the gateway can speak');
  const noTts = await startGateway(t, { ...OPTS, models: TEST_MODELS.filter((x) => x.kind !== 'tts') });
  const other = await noTts.account('1');
  const s2 = await connect(wsUrl(noTts), { headers: { authorization: `Bearer ${other.key}` } });
  assert.deepEqual((await s2.until((e) => e.type === 'session.created')).session.output_modalities, ['text'], 'nothing to speak with: text');
  s2.ws.close();
  await s2.closed;
  await assertInvariants(assert, gw, account);
});

test('a spoken reply is spoken sentence by sentence as its text streams: the first audio delta comes before the text is complete, the chunks in order, billed every character once', async (t) => {
  const { extractText } = await import('../dist/sim/speech.js');
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  // sim streams a token every 40 ms: 120 tokens take about 5 s.
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}`, 'x-sim-token-delay-ms': '40' } });
  await s.until((e) => e.type === 'session.created');
  s.send(userText('Tell me a long story about gateways.'));
  s.send({ type: 'response.create', response: { output_modalities: ['audio'], max_output_tokens: 120 } });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed', JSON.stringify(done.response.status_details));
  const types = s.events.map((e) => e.type);
  const firstAudio = types.indexOf('response.output_audio.delta');
  const lastText = types.lastIndexOf('response.output_audio_transcript.delta');
  assert.ok(firstAudio > 0 && firstAudio < lastText, `the first audio delta (event ${firstAudio}) comes before the text's last delta (event ${lastText})`);
  assert.ok(types.indexOf('response.output_audio.done') > types.lastIndexOf('response.output_audio.delta'));
  const transcript = done.response.output[0].content[0].transcript;
  // sim's speech carries each chunk's text in its first samples: read the chunks back in order.
  const pcm = Buffer.concat(s.events.filter((e) => e.type === 'response.output_audio.delta').map((e) => Buffer.from(e.delta, 'base64')));
  const samples = new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length / 2);
  const chunks = [];
  for (let at = 0; at < samples.length;) {
    const said = extractText(samples.subarray(at));
    assert.ok(said !== undefined, `a chunk starts at sample ${at}`);
    chunks.push(said);
    at += [...said].length * 60 * 24;
  }
  assert.ok(chunks.length > 1, `spoken in sentences: ${JSON.stringify(chunks)}`);
  assert.equal(chunks.join(''), transcript, 'the chunks, in order, are the whole reply');
  assert.match(chunks[0], /[.!?]$/, 'the first chunk is a whole sentence');
  const u = done.response.usage;
  const expected = priceNano(u.input_tokens, u.output_tokens) + BigInt([...transcript].length) * SIM_TTS_ND_PER_CHAR;
  assert.equal(await spentBecomes(gw, account, before, expected), expected, 'every character billed once, at the speech price');
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, gw, account);
});

test('speech chunks: cut just after a sentence end followed by a space (at least 20 characters), a newline, or a run-on at its last space past 400; "3.14" is no sentence end', async () => {
  const { sentenceCut } = await import('../dist/families/alpha/realtime/sentences.js');
  assert.equal(sentenceCut('Yes. The gateway is open today'), 0, 'too short a sentence waits for the next');
  assert.equal(sentenceCut('The gateway is open today. And'), 26);
  assert.equal(sentenceCut('The gateway is open today.'), 0, 'the end is not known until what follows');
  assert.equal(sentenceCut('Pi is about 3.14 and that is all there is'), 0);
  assert.equal(sentenceCut('Is the gateway open today? Yes'), 26);
  assert.equal(sentenceCut('a list of things to say\nnext'), 24);
  const runOn = 'word '.repeat(100);
  const cut = sentenceCut(runOn);
  assert.ok(cut > 0 && cut <= 400 && runOn[cut] === ' ', `a run-on is cut at a space (${cut})`);
});

test('the embedded default serves OpenAI\'s quickstart model names: gpt-realtime (and the preview names) open a session on sim-realtime, a text turn billed at its token prices', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const { key, account } = await gw.account('1');
  for (const name of ['gpt-realtime', 'gpt-4o-realtime-preview', 'gpt-4o-mini-realtime-preview']) {
    const before = await balanceNano(gw, account);
    const s = await connect(wsUrl(gw, '/v1/realtime', name), { headers: { authorization: `Bearer ${key}` } });
    assert.ok(s.ws, `${name}: ${JSON.stringify(s.refused)}`);
    assert.equal((await s.until((e) => e.type === 'session.created')).session.model, 'sim-realtime');
    s.send(userText('Hello, realtime model.'));
    s.send({ type: 'response.create', response: TEXT });
    const done = await s.until((e) => e.type === 'response.done');
    assert.equal(done.response.status, 'completed');
    const u = done.response.usage;
    // sim-realtime: $4 in, $16 out per million tokens.
    const expected = priceNano(u.input_tokens, u.output_tokens, 4_000_000_000n, 16_000_000_000n);
    assert.equal(await spentBecomes(gw, account, before, expected), expected);
    s.ws.close();
    await s.closed;
  }
  await assertInvariants(assert, gw, account);
});

test('a realtime model name that is not configured is refused with a suggestion of a model that opens a session, never a chat-only name', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const { key } = await gw.account('1');
  const s = await connect(wsUrl(gw, '/v1/realtime', 'gpt-realtime-2'), { headers: { authorization: `Bearer ${key}` } });
  assert.equal(s.refused?.status, 404);
  assert.equal(s.refused.body.error.code, 'model_not_found');
  assert.match(s.refused.body.error.message, /Did you mean `gpt-realtime`\?/);
  // The chat routes suggest chat models only.
  const r = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' },
    body: chatBody({ model: 'gpt-realtime' }) });
  assert.equal(r.status, 404);
  const body = await r.json();
  assert.doesNotMatch(body.error.message, /Did you mean `(gpt-realtime|gpt-4o[a-z-]*realtime[a-z-]*|sim-realtime)`/);
});

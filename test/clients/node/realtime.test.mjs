// The official `openai` npm client's OpenAIRealtimeWebSocket (the browser transport: the key in the
// `openai-insecure-api-key.` subprotocol) against a real gateway: a text turn billed exactly its usage,
// an audio turn heard by server VAD, a session.update refused for pcmu, and ephemeral client secrets
// minted with the client: used, and refused once expired or once their parent key is revoked.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import WebSocket from 'ws';
import { OpenAIRealtimeWebSocket } from 'openai/realtime/websocket';
import { startGateway, costNano } from './gateway.mjs';

// Node 20 has no global WebSocket (22 has): the client takes the `ws` package's, which speaks the same interface.
globalThis.WebSocket ??= WebSocket;

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

/** Opens the client's realtime socket on the gateway (the client always says wss://; a plain-HTTP gateway is ws://). */
function open(client, model = 'sim-chat') {
  const rt = new OpenAIRealtimeWebSocket({ model, onURL: (url) => { url.protocol = 'ws'; } }, client);
  const events = [];
  const waiters = [];
  rt.on('event', (e) => { events.push(e); for (const w of waiters.splice(0)) w(); });
  // Error events are also emitted as `error`; they are read from `events` here.
  rt.on('error', () => {});
  const until = async (pred, from = 0) => {
    for (;;) {
      const hit = events.slice(from).find(pred);
      if (hit) return hit;
      await new Promise((r) => waiters.push(r));
    }
  };
  return { rt, events, until };
}

async function textTurn(c, text) {
  const from = c.events.length;
  c.rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text }] } });
  c.rt.send({ type: 'response.create', response: { output_modalities: ['text'] } }); // sessions start with audio out
  const done = await c.until((e) => e.type === 'response.done', from);
  const deltas = c.events.slice(from).filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  return { done, deltas };
}

test('OpenAIRealtimeWebSocket: a text turn streams the reply and is billed exactly its usage', async () => {
  const acct = await gw.account('5');
  const before = await gw.balance(acct.key);
  const c = open(gw.client(acct.key, '/alpha/v1'));
  const created = await c.until((e) => e.type === 'session.created');
  assert.equal(created.session.model, 'sim-chat');
  const { done, deltas } = await textTurn(c, 'Say hello to the realtime gateway.');
  assert.equal(done.response.status, 'completed');
  assert.ok(deltas.length > 0);
  assert.equal(done.response.output[0].content[0].text, deltas);
  const u = done.response.usage;
  c.rt.close();
  const nano = costNano('sim-chat', u.input_tokens, u.output_tokens);
  assert.equal(before - await gw.settledBalance(acct.key, before), nano);
});

test('OpenAIRealtimeWebSocket: session.update with pcmu is an error event naming the field; the session keeps its configuration', async () => {
  const acct = await gw.account('5');
  const c = open(gw.client(acct.key, '/v1'));
  await c.until((e) => e.type === 'session.created');
  c.rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Kept.' } });
  await c.until((e) => e.type === 'session.updated');
  const from = c.events.length;
  c.rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Not kept.', audio: { output: { format: { type: 'audio/pcmu' } } } } });
  const err = await c.until((e) => e.type === 'error', from);
  assert.equal(err.error.code, 'unsupported_parameter');
  assert.equal(err.error.param, 'session.audio.output.format');
  const from2 = c.events.length;
  c.rt.send({ type: 'session.update', session: { type: 'realtime' } });
  assert.equal((await c.until((e) => e.type === 'session.updated', from2)).session.instructions, 'Kept.');
  c.rt.close();
});

test('an ephemeral client secret minted with client.realtime.clientSecrets.create opens a session from the browser transport, billed to its parent', async () => {
  const acct = await gw.account('5');
  const secret = await gw.client(acct.key, '/v1').realtime.clientSecrets.create({ session: { type: 'realtime', model: 'sim-chat', instructions: 'From the secret.' } });
  assert.match(secret.value, /^ek_/);
  const before = await gw.balance(acct.key);
  const c = open(gw.client(secret.value, '/v1'));
  const created = await c.until((e) => e.type === 'session.created');
  assert.equal(created.session.instructions, 'From the secret.');
  const { done } = await textTurn(c, 'Hello with an ephemeral key.');
  c.rt.close();
  const u = done.response.usage;
  assert.equal(before - await gw.settledBalance(acct.key, before), costNano('sim-chat', u.input_tokens, u.output_tokens));
});

test('OpenAIRealtimeWebSocket: an audio turn is heard by server VAD, transcribed and answered in speech, billed audio in, tokens and characters', async () => {
  const acct = await gw.account('5');
  const client = gw.client(acct.key, '/v1');
  const said = 'Where does the night train stop?';
  const before = await gw.balance(acct.key);
  // The user's speech: sim's, fetched with the client's audio.speech as 24 kHz PCM (60 ms a character).
  const pcm = Buffer.from(await (await client.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: said, response_format: 'pcm' })).arrayBuffer());
  assert.equal(pcm.length, [...said].length * 60 * 48);
  const c = open(client);
  await c.until((e) => e.type === 'session.created');
  c.rt.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['audio'],
    audio: { input: { transcription: { model: 'whisper-1' } }, output: { voice: 'marin' } } } });
  await c.until((e) => e.type === 'session.updated');
  const from = c.events.length;
  const speechAndSilence = Buffer.concat([pcm, Buffer.alloc(48_000)]); // then a second of silence ends the turn
  for (let i = 0; i < speechAndSilence.length; i += 9600) {
    c.rt.send({ type: 'input_audio_buffer.append', audio: speechAndSilence.subarray(i, i + 9600).toString('base64') });
  }
  const done = await c.until((e) => e.type === 'response.done' || e.type === 'error', from);
  assert.equal(done.type, 'response.done', JSON.stringify(done));
  c.rt.close();
  const seen = c.events.slice(from).map((e) => e.type);
  assert.ok(seen.indexOf('input_audio_buffer.speech_started') < seen.indexOf('input_audio_buffer.speech_stopped'));
  assert.ok(seen.indexOf('input_audio_buffer.speech_stopped') < seen.indexOf('input_audio_buffer.committed'));
  const heard = c.events.slice(from).find((e) => e.type === 'conversation.item.input_audio_transcription.completed');
  assert.equal(heard.transcript, said);
  const text = c.events.slice(from).filter((e) => e.type === 'response.output_audio_transcript.delta').map((e) => e.delta).join('');
  const audio = c.events.slice(from).filter((e) => e.type === 'response.output_audio.delta').reduce((n, e) => n + Buffer.from(e.delta, 'base64').length, 0);
  assert.equal(done.response.status, 'completed');
  assert.ok(text.length > 0);
  assert.equal(done.response.output[0].content[0].transcript, text);
  assert.equal(audio, [...text].length * 60 * 48, 'every character of the reply spoken');
  // The embedded default's prices: speech $15 per million characters, transcription $0.006 a minute (100 nd a ms).
  const u = done.response.usage;
  const spent = BigInt([...said].length) * 15_000n + BigInt(Math.round(heard.usage.seconds * 1000)) * 100n
    + costNano('sim-chat', u.input_tokens, u.output_tokens) + BigInt([...text].length) * 15_000n;
  let after = await gw.settledBalance(acct.key, before);
  for (let i = 0; i < 40 && before - after !== spent; i++) { await new Promise((r) => setTimeout(r, 50)); after = await gw.balance(acct.key); }
  assert.equal(before - after, spent);
});

/** Opens the client's socket with `key` and resolves with how the upgrade was refused: the client's error event. */
function refusal(key) {
  const rt = new OpenAIRealtimeWebSocket({ model: 'sim-chat', onURL: (url) => { url.protocol = 'ws'; } }, gw.client(key, '/v1'));
  return new Promise((resolve) => {
    rt.on('event', (e) => resolve({ opened: e.type }));
    rt.on('error', (err) => resolve({ error: err }));
    rt.socket.addEventListener('close', () => resolve({ closed: true }));
  }).finally(() => { try { rt.close(); } catch { /* already closed */ } });
}

test('ephemeral client secrets open no session once expired or once their parent key is revoked', async () => {
  const acct = await gw.account('5');
  const parent = gw.client(acct.key, '/v1');
  const short = await parent.realtime.clientSecrets.create({ expires_after: { anchor: 'created_at', seconds: 10 }, session: { type: 'realtime', model: 'sim-chat' } });
  const long = await parent.realtime.clientSecrets.create({ session: { type: 'realtime', model: 'sim-chat' } });
  assert.deepEqual(await refusal(long.value), { opened: 'session.created' }, 'the 10-minute secret opens a session');
  await new Promise((r) => setTimeout(r, Math.max(0, short.expires_at * 1000 - Date.now()) + 1000));
  const expired = await refusal(short.value);
  assert.ok(!expired.opened, 'the expired secret opens nothing');
  await gw.cli('key', 'revoke', acct.key);
  let revoked;
  for (let i = 0; i < 50; i++) { // the revocation reaches the key cache through the change feed
    revoked = await refusal(long.value);
    if (!revoked.opened) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.ok(!revoked.opened, 'a secret of a revoked key opens nothing');
  // The browser transport cannot see an upgrade's status: the same secrets through a plain upgrade request say why.
  for (const [value, why] of [[short.value, /expired/], [long.value, /revoked/]]) {
    const { status, body } = await new Promise((resolve, reject) => {
      const req = http.get(`${gw.url}/v1/realtime?model=sim-chat`, { headers: { connection: 'Upgrade', upgrade: 'websocket',
        'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', authorization: `Bearer ${value}` } });
      req.on('upgrade', () => reject(new Error('upgraded')));
      req.on('response', (res) => { let b = ''; res.on('data', (d) => { b += d; }); res.on('end', () => resolve({ status: res.statusCode, body: b })); });
      req.on('error', reject);
    });
    assert.equal(status, 401);
    assert.match(body, why);
  }
});

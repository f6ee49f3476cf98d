// The official `openai` npm client's OpenAIRealtimeWebSocket (the browser transport: the key in the
// `openai-insecure-api-key.` subprotocol) against a real gateway: a text turn billed exactly its usage,
// a session.update refused for pcmu, and an ephemeral client secret minted with the client and used.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
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

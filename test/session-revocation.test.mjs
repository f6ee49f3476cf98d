// Open sessions follow the change feed (issue 23, item 6): a key revoked (through the CLI, another process), a client
// secret that expires, a ceiling lowered, or a realtime session left idle ends or refuses what comes next, billing what ran.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import pg from '../node_modules/pg/lib/index.js';
import { startGateway, assertInvariants, priceNano, TEST_MODELS, balanceNano } from './helpers/gateway.mjs';
import { connect, closedWithin } from './helpers/ws.mjs';

const UPSTREAMS = { sim: { sim: {} }, rt: { sim: {}, realtime_api: true } };
/** A realtime model on an upstream that speaks the protocol itself: relayed (the pass-through). */
const PASS = { id: 'sim-rt-pass', upstream: 'rt', upstream_model: 'sim-chat', kind: 'realtime', simulated: true,
  input_per_mtok: '4', cached_input_per_mtok: '0.40', audio_input_per_mtok: '32', output_per_mtok: '16', audio_output_per_mtok: '64', max_output_tokens: 4096 };
const MODELS = [...TEST_MODELS, PASS];
const VOICE = 'JBFqnCBsd6RMkjVDRZzb';
const PER_CHAR = 15_000n; // sim-tts: $15 a million characters
/** Generous: the change feed shows a revocation within about a second; this only tells a session that never ends from one that does. */
const ENDS_WITHIN_MS = 10_000;

const ws = (gw) => gw.url.replace(/^http/, 'ws');
const realtimeUrl = (gw, model = 'sim-chat') => `${ws(gw)}/alpha/v1/realtime?model=${model}`;
const speechUrl = (gw, route) => `${ws(gw)}/beta/v1/text-to-speech/${VOICE}/${route}?output_format=pcm_16000&model_id=sim-tts`;
const TEXT = { output_modalities: ['text'] };

/** Spend since `before` once it reaches `want` (debits commit just after they are durable), or what it is after a few seconds. */
async function spentBecomes(gw, account, before, want) {
  let spent = before - await balanceNano(gw, account);
  for (let i = 0; i < 60 && spent !== want; i++) { await new Promise((x) => setTimeout(x, 50)); spent = before - await balanceNano(gw, account); }
  return spent;
}

/** One text response on a realtime session: its price, from the usage response.done reports. */
async function oneResponse(s, text, price = (u) => priceNano(u.input_tokens, u.output_tokens)) {
  const from = s.frames.length;
  s.send({ type: 'response.create', response: { ...TEXT, conversation: 'none', max_output_tokens: 40,
    input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text }] }] } });
  const done = await s.until((e) => e.type === 'response.done', from);
  assert.equal(done.response.status, 'completed');
  return price(done.response.usage);
}

/** The pass-through model's price of what its upstream reported. */
function passPrice(u) {
  const d = u.input_token_details ?? {};
  const cached = d.cached_tokens ?? 0;
  const audioIn = (d.audio_tokens ?? 0) - (d.cached_tokens_details?.audio_tokens ?? 0);
  const audioOut = u.output_token_details?.audio_tokens ?? 0;
  const num = BigInt(u.input_tokens - cached - audioIn) * 4_000_000_000n + BigInt(cached) * 400_000_000n + BigInt(audioIn) * 32_000_000_000n
    + BigInt(u.output_tokens - audioOut) * 16_000_000_000n + BigInt(audioOut) * 64_000_000_000n;
  return num === 0n ? 0n : (num + 999_999n) / 1_000_000n;
}

/** A stream-input session (either route) with one generation heard: resolves with the socket and what that generation costs. */
async function speaking(gw, route, key, said) {
  const s = await connect(speechUrl(gw, route), { headers: { 'xi-api-key': key } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  s.send({ text: ' ' });
  s.send({ text: said, flush: true });
  await s.until((f) => typeof f.audio === 'string');
  return { s, cost: BigInt([...said].length) * PER_CHAR };
}

for (const [store, opts] of [['PostgreSQL + Redis', { store: 'postgres', redis: true }], ['the embedded store', { store: 'pglite' }]]) {
  test(`a key revoked through the CLI while its sessions are open ends every one of them: realtime (cascade and pass-through) gets an error event invalid_api_key, stream-input and multi-stream-input an error message, each closes with 1008; what ran is billed, nothing after (${store})`, async (t) => {
    const gw = await startGateway(t, { ...opts, upstreams: UPSTREAMS, models: MODELS });
    const { key, prefix, account } = await gw.account('5');
    const before = await balanceNano(gw, account);
    const cascade = await connect(realtimeUrl(gw), { headers: { authorization: `Bearer ${key}` } });
    assert.ok(cascade.ws, JSON.stringify(cascade.refused));
    const relayed = await connect(realtimeUrl(gw, 'sim-rt-pass'), { headers: { authorization: `Bearer ${key}` } });
    assert.ok(relayed.ws, JSON.stringify(relayed.refused));
    let ran = await oneResponse(cascade, 'Say something short.');
    ran += await oneResponse(relayed, 'Say something short.', passPrice);
    const single = await speaking(gw, 'stream-input', key, 'One sentence is spoken before the key goes. ');
    const multi = await speaking(gw, 'multi-stream-input', key, 'Another is spoken on the multi route. ');
    ran += single.cost + multi.cost;
    assert.equal(await spentBecomes(gw, account, before, ran), ran);

    await gw.cli('key', 'revoke', prefix);
    const revokedAt = Date.now();
    const closedAt = await Promise.all([cascade, relayed, single.s, multi.s].map((s) => closedWithin(s, ENDS_WITHIN_MS).then(() => Date.now())));
    t.diagnostic(`sessions closed ${closedAt.map((x) => x - revokedAt).join(', ')} ms after the CLI's revocation returned`);
    for (const s of [cascade, relayed]) {
      const close = await closedWithin(s, ENDS_WITHIN_MS);
      assert.equal(close?.code, 1008, 'closed by the gateway with 1008 (policy), without the client doing anything');
      const err = s.frames.find((e) => e.type === 'error');
      assert.equal(err?.error.code, 'invalid_api_key');
      assert.match(err.error.message, /revoked/);
    }
    for (const { s } of [single, multi]) {
      const close = await closedWithin(s, ENDS_WITHIN_MS);
      assert.equal(close?.code, 1008);
      const err = s.frames.find((f) => f.error === 'invalid_api_key');
      assert.ok(err, JSON.stringify(s.frames.filter((f) => !f.audio)));
      assert.match(err.message, /revoked/);
    }
    assert.equal(await spentBecomes(gw, account, before, ran), ran, 'billed what ran before the revocation, nothing more');
    await assertInvariants(assert, gw, account);
  });
}

test('a realtime session opened with a client secret ends when the secret expires: an error event saying so, then 1008', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: UPSTREAMS, models: MODELS });
  const { key, account } = await gw.account('1');
  const mint = async () => (await (await gw.fetch('/alpha/v1/realtime/client_secrets', { method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ expires_after: { anchor: 'created_at', seconds: 10 }, session: { type: 'realtime', model: 'sim-chat', output_modalities: ['text'] } }) })).json()).value;
  const s = await connect(`${ws(gw)}/alpha/v1/realtime`, { protocols: ['realtime', `openai-insecure-api-key.${await mint()}`] });
  assert.ok(s.ws, JSON.stringify(s.refused));
  await s.until((e) => e.type === 'session.created');
  const close = await closedWithin(s, 10_000 + ENDS_WITHIN_MS);
  assert.equal(close?.code, 1008);
  const err = s.frames.find((e) => e.type === 'error');
  assert.equal(err?.error.code, 'invalid_api_key');
  assert.match(err.error.message, /expired/);
  await assertInvariants(assert, gw, account);
});

test('a ceiling lowered while sessions are open stops their next part: the next realtime response gets key_spend_limit_reached and 1008, the next generation too; billed only what ran (PostgreSQL)', async (t) => {
  const gw = await startGateway(t, { store: 'postgres', upstreams: UPSTREAMS, models: MODELS });
  const { key, prefix, account } = await gw.account('5');
  const before = await balanceNano(gw, account);
  const s = await connect(realtimeUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  let ran = await oneResponse(s, 'Say something short.');
  const speech = await speaking(gw, 'stream-input', key, 'A sentence spoken before the ceiling drops. ');
  ran += speech.cost;
  // Another process (the console of another instance) lowers the key's ceiling to 1 nanodollar.
  const client = new pg.Client({ connectionString: gw.db.url });
  await client.connect();
  await client.query("UPDATE api_keys SET spend_limit_nd = 1, spend_limit_period = 'monthly' WHERE prefix = $1", [prefix]);
  await client.end();
  // The gateway has it once /svc/v1/key shows it.
  let limit = null;
  for (let i = 0; i < 100 && limit === null; i++) {
    limit = (await (await gw.fetch('/svc/v1/key', { headers: { authorization: `Bearer ${key}` } })).json()).limit;
    if (limit === null) await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(limit, 0.000000001, 'the change feed brought the new ceiling');
  const from = s.frames.length;
  s.send({ type: 'response.create', response: { ...TEXT, conversation: 'none', input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'More.' }] }] } });
  const err = await s.until((e) => e.type === 'error', from);
  assert.equal(err.error.code, 'key_spend_limit_reached');
  assert.equal((await s.closed).code, 1008);
  speech.s.send({ text: 'And this sentence should not be spoken at all. ', flush: true });
  assert.equal((await speech.s.closed).code, 1008);
  assert.match(JSON.stringify(speech.s.frames) + (await speech.s.closed).reason, /key_spend_limit_reached/);
  assert.equal(await spentBecomes(gw, account, before, ran), ran, 'only what ran before the ceiling dropped');
  await assertInvariants(assert, gw, account);
});

test('a realtime session with no client event for realtime.idle_timeout_s is told (session_idle_timeout) and closed with 1008, cascade and pass-through; one that keeps talking stays open', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', upstreams: UPSTREAMS, models: MODELS, realtime: { idle_timeout_s: 2 } });
  const { key, account } = await gw.account('1');
  const talking = await connect(realtimeUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  const quiet = await connect(realtimeUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  const relayed = await connect(realtimeUrl(gw, 'sim-rt-pass'), { headers: { authorization: `Bearer ${key}` } });
  for (const s of [talking, quiet, relayed]) assert.ok(s.ws, JSON.stringify(s.refused));
  const chatter = setInterval(() => talking.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Still here.' } }), 500);
  for (const s of [quiet, relayed]) {
    const close = await closedWithin(s, 2_000 + ENDS_WITHIN_MS);
    assert.equal(close?.code, 1008);
    assert.equal(s.frames.find((e) => e.type === 'error')?.error.code, 'session_idle_timeout');
  }
  clearInterval(chatter);
  assert.equal(talking.ws.readyState, 1, 'a session that sends events is not idle');
  talking.ws.close();
  await talking.closed;
  await assertInvariants(assert, gw, account);
});

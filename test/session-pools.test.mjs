// Sessions and voice cloning over a model's pool (issue 27): a realtime cascade's and a stream-input's upstream calls go over the pool,
// a pass-through socket holds one upstream's slot for its life and opens on the next upstream when one refuses, a cloned voice lives on
// every upstream of its pool under each one's own id.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import pg from 'pg';
import { startGateway, assertInvariants, balanceNano, priceNano, dollarsToNano } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';
import { ledgerOf } from './helpers/recovery.mjs';
import { spawnSim, refusedUrl } from './helpers/stub-upstream.mjs';
import { wav } from './helpers/wav.mjs';
import { startSim } from '../dist/sim/index.js';
import { synth } from '../dist/sim/speech.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Probes off: a sim counts them, and the tests decide when an upstream is down.
const up = (url, extra = {}) => ({ base_url: url, ...extra, health: { probe_interval_ms: 0, ...extra.health } });
const SIM_STT_ND_PER_MS = 100n; // $0.006 a minute
const SIM_TTS_ND_PER_CHAR = 15_000n; // $15 a million characters
const CLONE_ND_PER_CHAR = 30_000n; // $30 a million characters
const STS_ND_PER_MS = 3_000n; // $0.18 a minute
const VOICE = 'JBFqnCBsd6RMkjVDRZzb'; // a premade voice of the beta family
/** The pass-through model: priced as OpenAI's gpt-realtime; its upstream's model is sim-chat. */
const PASS = { upstream_model: 'sim-chat', kind: 'realtime', input_per_mtok: '4', cached_input_per_mtok: '0.40', audio_input_per_mtok: '32', output_per_mtok: '16', audio_output_per_mtok: '64', max_output_tokens: 4096 };

async function liveSim(t) {
  const sim = await startSim();
  t.after(() => sim.close());
  return sim;
}

/** An HTTP server that answers every WebSocket upgrade 503 with Retry-After (nothing generated); counts the upgrades. */
async function busyUpgrades(t) {
  const server = http.createServer((_req, res) => { res.writeHead(404).end(); });
  const s = { upgrades: 0 };
  server.on('upgrade', (_req, socket) => {
    s.upgrades++;
    const body = JSON.stringify({ error: { message: 'overloaded', type: 'server_error', code: null } });
    socket.end(`HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 30\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }));
  s.url = `http://127.0.0.1:${server.address().port}`;
  return s;
}

async function metrics(gw) { return (await gw.fetch('/metrics')).text(); }
function metric(text, name, upstream) {
  const m = new RegExp(`^${name}\\{upstream="${upstream}"\\} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : undefined;
}
const inFlight = (text, upstream) => metric(text, 'tollgate_upstream_in_flight', upstream);
/** Waits until `pred(metrics text)` holds (or 5 s pass), returning the last text. */
async function metricsUntil(gw, pred) {
  let text = '';
  for (let i = 0; i < 100; i++) { text = await metrics(gw); if (pred(text)) break; await sleep(50); }
  return text;
}
/** The ledger once no hold is open (every session has settled) and every settled debit is committed to it. */
async function settledLedger(gw, account) {
  await metricsUntil(gw, (m) => /^tollgate_open_holds 0$/m.test(m));
  // A settled debit is durable in Redis at once and reaches PostgreSQL in the next group commit.
  await gw.debitsLanded();
  return ledgerOf(gw.db.url, account);
}

/** PCM16 at 24 kHz as base64 appends of 100 ms each. */
function appends(samples) {
  const bytes = Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
  const out = [];
  for (let i = 0; i < bytes.length; i += 4800) out.push({ type: 'input_audio_buffer.append', audio: bytes.subarray(i, i + 4800).toString('base64') });
  return out;
}

/** A stream-input session: the frames sent in order, then every frame received until the close. */
async function streamInput(gw, key, voice, query, frames) {
  const s = await connect(`${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${voice}/stream-input?${query}`, { 'xi-api-key': key });
  assert.ok(s.ws, JSON.stringify(s.refused));
  for (const f of frames) s.send(f);
  const closed = await s.closed;
  return { ...closed, frames: s.frames };
}

const userText = (text) => ({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text }] } });

test('a realtime cascade session and a stream-input session on models whose first upstream is dead both work, every part billed once, the ledger exact', { timeout: 120_000 }, async (t) => {
  const dead = await refusedUrl();
  const live = await liveSim(t);
  const pool = [{ name: 'dead', priority: 0 }, { name: 'live', priority: 1 }];
  const gw = await startGateway(t, {
    store: 'postgres',
    upstreams: { dead: up(dead), live: up(live.url) },
    models: [
      { id: 'sim-chat', upstream: pool, kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 },
      { id: 'sim-tts', upstream: pool, kind: 'tts', per_mchar: '15' },
      { id: 'sim-stt', upstream: pool, kind: 'stt', audio_in_per_minute: '0.006' },
    ],
    realtime: { speech_model: 'sim-tts', transcription_model: 'sim-stt' },
  });
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  // The cascade: a spoken turn transcribed, a reply from the chat model, spoken by the speech model: three pools, each first upstream dead.
  const s = await connect(`${gw.url.replace(/^http/, 'ws')}/alpha/v1/realtime?model=sim-chat`, { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  await s.until((e) => e.type === 'session.created');
  s.send({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: null } } } });
  await s.until((e) => e.type === 'session.updated');
  const said = 'Hello there.';
  const speech = synth(said);
  for (const e of appends(speech)) s.send(e);
  s.send({ type: 'input_audio_buffer.commit' });
  const heard = await s.until((e) => ['conversation.item.input_audio_transcription.completed', 'conversation.item.input_audio_transcription.failed'].includes(e.type));
  assert.equal(heard.type, 'conversation.item.input_audio_transcription.completed', JSON.stringify(heard));
  assert.equal(heard.transcript, said);
  s.send({ type: 'response.create', response: { output_modalities: ['audio'], max_output_tokens: 40 } });
  const done = await s.until((e) => e.type === 'response.done');
  assert.equal(done.response.status, 'completed', JSON.stringify(done.response.status_details));
  assert.ok(s.frames.some((e) => e.type === 'response.output_audio.delta'), 'the reply is spoken');
  s.ws.close();
  await s.closed;
  // stream-input: each generation over the speech model's pool.
  const text = 'Streaming speech from the second upstream of the pool. ';
  const r = await streamInput(gw, key, VOICE, 'output_format=pcm_16000&model_id=sim-tts', [{ text: ' ' }, { text, flush: true }, { text: '' }]);
  assert.equal(r.code, 1000, JSON.stringify(r.frames.filter((f) => !f.audio)));
  assert.ok(r.frames.some((f) => f.audio), 'audio came');
  const streamCost = BigInt([...text].length) * SIM_TTS_ND_PER_CHAR;
  assert.equal(r.frames.at(-1).cost, Number(streamCost) / 1e9, 'the final frame states the characters synthesized');
  // Every part billed once: the transcription by its audio, the response by its tokens and characters (its response.done cost), the generation by its characters.
  const { debits, balance, total } = await settledLedger(gw, account);
  const transcription = BigInt(speech.length / 24) * SIM_STT_ND_PER_MS;
  const response = BigInt(Math.round(done.response.usage.cost * 1e9));
  const u = done.response.usage;
  assert.ok(response > priceNano(u.input_tokens, u.output_tokens), 'the response is billed its tokens and its spoken characters');
  const sorted = (xs) => [...xs].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  assert.deepEqual(sorted(debits.map((d) => -BigInt(d.amount))), sorted([transcription, response, streamCost]), JSON.stringify(debits));
  assert.equal(before - balance, transcription + response + streamCost);
  assert.equal(total, balance);
  await assertInvariants(assert, gw, account);
});

test('the pass-through socket opens on the second upstream when the first refuses the connection or answers the upgrade 503', { timeout: 240_000 }, async (t) => {
  const refused = await refusedUrl();
  const busy = await busyUpgrades(t);
  const live = await liveSim(t);
  const gw = await startGateway(t, {
    store: 'pglite',
    upstreams: { refused: up(refused, { realtime_api: true }), busy: up(busy.url, { realtime_api: true }), live: up(live.url, { realtime_api: true }) },
    models: [
      { id: 'rt-refused', upstream: [{ name: 'refused', priority: 0 }, { name: 'live', priority: 1 }], ...PASS },
      { id: 'rt-busy', upstream: [{ name: 'busy', priority: 0 }, { name: 'live', priority: 1 }], ...PASS },
    ],
  });
  const { key, account } = await gw.account('1');
  for (const model of ['rt-refused', 'rt-busy']) {
    const s = await connect(`${gw.url.replace(/^http/, 'ws')}/alpha/v1/realtime?model=${model}`, { headers: { authorization: `Bearer ${key}` } });
    assert.ok(s.ws, `${model}: ${JSON.stringify(s.refused)}`);
    const created = await s.until((e) => e.type === 'session.created');
    assert.equal(created.session.model, model);
    s.send(userText('Say hello.'));
    s.send({ type: 'response.create' });
    const done = await s.until((e) => e.type === 'response.done');
    assert.equal(done.response.status, 'completed');
    s.ws.close();
    await s.closed;
  }
  assert.equal(busy.upgrades, 1, 'the upgrade answered 503 was not sent again: the next upstream took it');
  const m = await metricsUntil(gw, (x) => inFlight(x, 'live') === 0);
  assert.equal(inFlight(m, 'live'), 0, 'both sockets closed: the slot is free');
  assert.equal(metric(m, 'tollgate_upstream_retries_total', 'refused'), 1);
  assert.equal(metric(m, 'tollgate_upstream_retries_total', 'busy'), 1);
  await assertInvariants(assert, gw, account);
});

test('max_concurrency 1 on each upstream: an open pass-through holds its slot, the next session goes to the other upstream, a third is refused upstream_busy, a closed one frees its slot', { timeout: 240_000 }, async (t) => {
  const a = await liveSim(t);
  const b = await liveSim(t);
  const one = { realtime_api: true, max_concurrency: 1, queue_ms: 0 };
  const gw = await startGateway(t, {
    store: 'pglite',
    upstreams: { a: up(a.url, one), b: up(b.url, one) },
    models: [{ id: 'rt', upstream: ['a', 'b'], ...PASS }],
  });
  const { key, account } = await gw.account('1', { concurrency: 10 });
  const open = async () => connect(`${gw.url.replace(/^http/, 'ws')}/alpha/v1/realtime?model=rt`, { headers: { authorization: `Bearer ${key}` } });
  const s1 = await open();
  assert.ok(s1.ws, JSON.stringify(s1.refused));
  await s1.until((e) => e.type === 'session.created');
  let m = await metrics(gw);
  assert.equal(inFlight(m, 'a') + inFlight(m, 'b'), 1, 'the open socket holds one slot');
  const s2 = await open();
  assert.ok(s2.ws, JSON.stringify(s2.refused));
  await s2.until((e) => e.type === 'session.created');
  m = await metrics(gw);
  assert.deepEqual([inFlight(m, 'a'), inFlight(m, 'b')], [1, 1], 'the second session went to the other upstream');
  const s3 = await open();
  assert.equal(s3.refused?.status, 503, JSON.stringify(s3.refused ?? 'opened'));
  assert.equal(s3.refused.body.error.code, 'upstream_busy');
  // s1 closes: its slot is free, and a new session takes it.
  s1.ws.close();
  await s1.closed;
  m = await metricsUntil(gw, (x) => inFlight(x, 'a') + inFlight(x, 'b') === 1);
  assert.equal(inFlight(m, 'a') + inFlight(m, 'b'), 1, 'a closed session frees its slot');
  const s4 = await open();
  assert.ok(s4.ws, JSON.stringify(s4.refused));
  await s4.until((e) => e.type === 'session.created');
  s4.send(userText('Say hello.'));
  s4.send({ type: 'response.create' });
  assert.equal((await s4.until((e) => e.type === 'response.done')).response.status, 'completed');
  for (const s of [s2, s4]) { s.ws.close(); await s.closed; }
  m = await metricsUntil(gw, (x) => inFlight(x, 'a') === 0 && inFlight(x, 'b') === 0);
  assert.deepEqual([inFlight(m, 'a'), inFlight(m, 'b')], [0, 0], 'every slot free once the sessions closed');
  await assertInvariants(assert, gw, account);
});

/** Each upstream's id of the voice, from the store. */
async function copiesOf(gw, voiceId) {
  const c = new pg.Client({ connectionString: gw.db.url });
  await c.connect();
  try {
    return Object.fromEntries((await c.query('SELECT upstream, upstream_voice_id FROM voice_upstreams WHERE voice_id = $1', [voiceId])).rows.map((r) => [r.upstream, r.upstream_voice_id]));
  } finally { await c.end(); }
}

/** The ids of the voices a sim holds. */
async function simVoices(sim) {
  return (await (await fetch(`${sim.url}/v1/audio/voices`)).json()).voices;
}

test('a voice cloned on a pooled model is on both upstreams under each one\'s id, speaks on each (one killed, it still speaks), and is deleted from both', { timeout: 120_000 }, async (t) => {
  const a = await spawnSim(t);
  const b = await spawnSim(t);
  const gw = await startGateway(t, {
    store: 'postgres',
    upstreams: { a: up(a.url), b: up(b.url) },
    models: [
      { id: 'sim-tts-clone', upstream: ['a', 'b'], kind: 'tts', voice_cloning: true, per_mchar: '30' },
      { id: 'sim-sts', upstream: ['a', 'b'], kind: 'sts', aliases: ['eleven_english_sts_v2'], audio_in_per_minute: '0.18' },
    ],
  });
  const { key, account } = await gw.account('5');
  const xi = { 'xi-api-key': key };
  const add = async (name) => {
    const form = new FormData();
    form.append('name', name);
    form.append('files', new Blob([wav(1.5)], { type: 'audio/wav' }), 'sample.wav');
    return gw.fetch('/beta/v1/voices/add', { method: 'POST', headers: xi, body: form });
  };
  const tts = (voice, text) => gw.fetch(`/beta/v1/text-to-speech/${voice}?output_format=pcm_16000`, { method: 'POST', headers: { ...xi, 'content-type': 'application/json' }, body: JSON.stringify({ text }) });
  let billed = 0n;
  // Cloned on both: each upstream gave its own id, and each knows the voice.
  let res = await add('Pooled');
  const v1 = (await res.json()).voice_id;
  assert.equal(res.status, 200);
  const c1 = await copiesOf(gw, v1);
  assert.deepEqual(Object.keys(c1).sort(), ['a', 'b']);
  assert.notEqual(c1.a, c1.b, 'each upstream has its own id of the voice');
  assert.deepEqual([await simVoices(a), await simVoices(b)], [[c1.a], [c1.b]]);
  // Spoken over the pool (sequential requests alternate between its two upstreams): each is sent its own id (another's it does not know: 404).
  for (let i = 0; i < 4; i++) {
    const text = `Sentence number ${i} in the cloned voice.`;
    res = await tts(v1, text);
    assert.equal(res.status, 200, await res.clone().text());
    await res.arrayBuffer();
    billed += BigInt(text.length) * CLONE_ND_PER_CHAR;
  }
  // Deleted from both.
  res = await gw.fetch(`/beta/v1/voices/${v1}`, { method: 'DELETE', headers: xi });
  assert.equal(res.status, 200);
  assert.deepEqual([await simVoices(a), await simVoices(b)], [[], []], 'the voice is gone from both upstreams');
  // Another voice; then one upstream dies: the voice still speaks (tts and sts) on the other, with that one's id.
  res = await add('Survivor');
  const v2 = (await res.json()).voice_id;
  assert.equal(res.status, 200);
  const c2 = await copiesOf(gw, v2);
  b.kill();
  await sleep(100);
  for (let i = 0; i < 2; i++) {
    const text = `Still speaking, take ${i}.`;
    res = await tts(v2, text);
    assert.equal(res.status, 200, await res.clone().text());
    await res.arrayBuffer();
    billed += BigInt(text.length) * CLONE_ND_PER_CHAR;
  }
  const sts = new FormData();
  sts.append('audio', new Blob([wav(2)], { type: 'audio/wav' }), 'in.wav');
  res = await gw.fetch(`/beta/v1/speech-to-speech/${v2}?output_format=pcm_16000`, { method: 'POST', headers: xi, body: sts });
  assert.equal(res.status, 200, await res.clone().text());
  await res.arrayBuffer();
  billed += 2000n * STS_ND_PER_MS;
  // A clone while one upstream is down: all or nothing (the copy made on the live one removed, the family's error, nothing stored, nothing billed).
  res = await add('Half');
  const half = await res.json();
  assert.equal(res.status, 502, JSON.stringify(half));
  assert.equal(half.detail.status, 'upstream_unavailable', 'the beta family\'s envelope');
  assert.deepEqual(await simVoices(a), [c2.a], 'the copy made on the live upstream is removed');
  const listed = (await (await gw.fetch('/beta/v1/voices', { headers: xi })).json()).voices.filter((v) => v.category !== 'premade').map((v) => v.name);
  assert.deepEqual(listed, ['Survivor']);
  res = await gw.fetch(`/beta/v1/voices/${v2}`, { method: 'DELETE', headers: xi });
  assert.equal(res.status, 200);
  assert.deepEqual(await simVoices(a), [], 'the live upstream\'s copy is removed');
  const { debits, balance, total } = await settledLedger(gw, account);
  assert.equal(debits.length, 7, 'six syntheses and one conversion, each billed once');
  assert.equal(dollarsToNano('5') - balance, billed);
  assert.equal(total, balance);
  await assertInvariants(assert, gw, account);
});

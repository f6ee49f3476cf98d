// ElevenLabs itself as an upstream (`protocol: elevenlabs`): the official Node client drives the beta family against a gateway whose
// speech models live on a stand-in of ElevenLabs' API; bodies go on as sent (ids resolved), billing is Tollgate's own, the upstream key is the operator's.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ElevenLabsClient, ElevenLabsError } from '@elevenlabs/elevenlabs-js';
import pg from '../node_modules/pg/lib/index.js';
import { startGateway, assertInvariants } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';
import { wav as tone, wavFile } from './helpers/wav.mjs';
import { startElevenLabs, audioOf, alignmentOf } from './helpers/elevenlabs-standin.mjs';

const UPSTREAM_KEY = 'sk_upstream_operator_key_0123456789';
const GEORGE = 'JBFqnCBsd6RMkjVDRZzb'; // a premade voice: the same id at Tollgate and at ElevenLabs

const MODELS = [
  { id: 'sim-chat', upstream: 'sim', kind: 'chat', simulated: true, input_per_mtok: '0.30', output_per_mtok: '2.50' },
  { id: 'eleven_multilingual_v2', upstream: 'eleven', kind: 'tts', per_mchar: '150', aliases: ['tts-eleven'] },
  { id: 'eleven_flash_v2_5', upstream: 'eleven', kind: 'tts', per_mchar: '75' },
  { id: 'eleven-clone', upstream: 'eleven', upstream_model: 'eleven_multilingual_v2', kind: 'tts', voice_cloning: true, per_mchar: '150' },
  { id: 'eleven_multilingual_sts_v2', upstream: 'eleven', kind: 'sts', audio_in_per_minute: '0.30' },
  { id: 'scribe', upstream: 'eleven', upstream_model: 'scribe_v1', aliases: ['scribe_v1'], kind: 'stt', audio_in_per_minute: '0.40' },
  // A model the stand-in does not have (404 model_not_found there); one pooled over a second ElevenLabs upstream and this one; one on the second alone.
  { id: 'eleven_retired', upstream: 'eleven', upstream_model: 'eleven_monolingual_v1', kind: 'tts', per_mchar: '150' },
  { id: 'eleven_pooled', upstream: [{ name: 'eleven2', priority: 0 }, { name: 'eleven', priority: 1 }], upstream_model: 'eleven_flash_v2_5', kind: 'tts', per_mchar: '75' },
  { id: 'eleven_solo', upstream: 'eleven2', upstream_model: 'eleven_flash_v2_5', kind: 'tts', per_mchar: '75' },
];
const ADAM = 'pNInz6obpgDQGcFmaJgB'; // a premade voice of Tollgate's list the stand-in does not have (404 voice_not_found there)

// One stand-in and one gateway serve every test (a gateway start costs seconds on a busy machine); each test has its
// own account and starts with the stand-in's record and voices cleared.
let shared = null;
const teardown = [];
before(async () => {
  const hooks = { after: (fn) => teardown.push(fn) };
  const standin = await startElevenLabs(hooks, UPSTREAM_KEY);
  const standin2 = await startElevenLabs(hooks, UPSTREAM_KEY);
  const eleven = (url) => ({ base_url: url, protocol: 'elevenlabs', api_key_env: 'TEST_ELEVENLABS_KEY', health: { probe_interval_ms: 0 } });
  const gw = await startGateway(hooks, {
    store: 'postgres',
    upstreams: { sim: { sim: {} }, eleven: eleven(standin.url), eleven2: eleven(standin2.url) },
    models: MODELS, env: { TEST_ELEVENLABS_KEY: UPSTREAM_KEY },
  });
  const db = new pg.Client({ connectionString: gw.db.url });
  db.on('error', () => undefined); // the database is dropped with FORCE at the end
  await db.connect();
  teardown.push(() => db.end().catch(() => undefined));
  shared = { standin, standin2, gw, db };
});
after(async () => { for (const fn of teardown.reverse()) await fn(); });

async function setup() {
  const { standin, standin2, gw, db } = shared;
  for (const st of [standin, standin2]) {
    st.requests.length = 0;
    st.sockets.length = 0;
    st.voices.clear();
    st.failures.length = 0;
  }
  const acct = await gw.account('5');
  const client = new ElevenLabsClient({ apiKey: acct.key, baseUrl: `${gw.url}/beta`, maxRetries: 0, timeoutInSeconds: 30 });
  /** The account's debits, oldest first, once `n` of them are durable. */
  const debits = async (n) => {
    for (let i = 0; i < 200; i++) {
      const rows = (await db.query("SELECT -amount_nd AS amount, reason, model, usage FROM ledger WHERE account_id = $1 AND kind = 'debit' ORDER BY id", [acct.account])).rows;
      if (rows.length >= n) return rows.map((r) => ({ ...r, amount: BigInt(r.amount) }));
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`fewer than ${n} debits`);
  };
  return { standin, standin2, gw, client, ...acct, debits };
}

async function bytes(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(Buffer.from(c));
  return Buffer.concat(chunks);
}

/** ceil(characters × $/M chars) in nanodollars. */
const charCost = (chars, perM) => (BigInt(chars) * BigInt(perM) * 1_000_000_000n + 999_999n) / 1_000_000n;
/** ceil(ms × $/minute) in nanodollars. */
const secondsCost = (ms, perMinuteNano) => (BigInt(ms) * perMinuteNano + 59_999n) / 60_000n;

/** A 16 kHz WAV of `ms` milliseconds of a tone. */
const wav = (ms) => tone(ms / 1000, { amp: 8000, step: 1 / 5 });

test('text to speech on every route goes to ElevenLabs as sent, with the upstream key, and is billed by Tollgate\'s character count', async () => {
  const { standin, gw, client, key, account, debits } = await setup();
  const text = 'Hello from the upstream.';
  const body = { text, modelId: 'eleven_flash_v2_5', outputFormat: 'mp3_44100_128', voiceSettings: { stability: 0.4, similarityBoost: 0.7 }, seed: 7 };

  const plain = await bytes(await client.textToSpeech.convert(GEORGE, body));
  assert.ok(plain.equals(audioOf(text, 'mp3_44100_128').body), 'the upstream\'s mp3 reaches the client byte for byte');
  const streamed = await bytes(await client.textToSpeech.stream(GEORGE, { ...body, outputFormat: 'pcm_16000' }));
  assert.ok(streamed.equals(audioOf(text, 'pcm_16000').body));
  assert.equal(streamed.length, Math.round(text.length * 0.06 * 16000) * 2);

  const ts = await client.textToSpeech.convertWithTimestamps(GEORGE, { ...body, outputFormat: 'pcm_24000' });
  assert.ok(Buffer.from(ts.audioBase64, 'base64').equals(audioOf(text, 'pcm_24000').body));
  assert.deepEqual(ts.alignment.characters, [...text]);
  assert.deepEqual(ts.alignment.characterEndTimesSeconds, alignmentOf(text).character_end_times_seconds);
  assert.deepEqual(ts.normalizedAlignment.characters, [...text]);

  const chunks = [];
  for await (const c of await client.textToSpeech.streamWithTimestamps(GEORGE, { ...body, outputFormat: 'pcm_24000' })) chunks.push(c);
  assert.ok(chunks.length > 1, 'one chunk a word');
  assert.deepEqual(chunks.flatMap((c) => c.alignment.characters), [...text]);
  assert.equal(chunks.reduce((n, c) => n + Buffer.from(c.audioBase64, 'base64').length, 0), Math.round(text.length * 0.06 * 24000) * 2);

  // What the stand-in saw: the operator's key (never the user's), the voice and query as sent, the body untouched but for model_id.
  const tts = standin.requests.filter((r) => r.path.startsWith('/v1/text-to-speech/'));
  assert.deepEqual(tts.map((r) => r.path), [`/v1/text-to-speech/${GEORGE}`, `/v1/text-to-speech/${GEORGE}/stream`,
    `/v1/text-to-speech/${GEORGE}/with-timestamps`, `/v1/text-to-speech/${GEORGE}/stream/with-timestamps`]);
  for (const r of tts) {
    assert.equal(r.headers['xi-api-key'], UPSTREAM_KEY);
    assert.ok(!JSON.stringify(r.headers).includes(key), 'the user\'s key never reaches the upstream');
    assert.equal(r.headers.authorization, undefined);
    assert.deepEqual(r.json, { text, model_id: 'eleven_flash_v2_5', voice_settings: { stability: 0.4, similarity_boost: 0.7 }, seed: 7 });
  }
  assert.deepEqual(tts.map((r) => r.query.output_format), ['mp3_44100_128', 'pcm_16000', 'pcm_24000', 'pcm_24000']);

  // Billed by the characters Tollgate counted, at the model's price; ElevenLabs' own count is kept for reconciliation.
  const rows = await debits(4);
  assert.equal(rows.length, 4);
  for (const r of rows) {
    assert.equal(r.model, 'eleven_flash_v2_5');
    assert.equal(r.amount, charCost(text.length, 75));
    assert.equal(r.usage.characters, text.length);
    assert.equal(r.usage.basis, 'exact');
    assert.equal(r.usage.upstream_headers['x-character-count'], String(text.length));
    assert.match(r.usage.upstream_headers['request-id'], /^[0-9a-f]{20}$/);
  }
  await assertInvariants(assert, gw, account);
});

test('a cloned voice is cloned on ElevenLabs, synthesizes by the id it gave, and deleting it deletes it there', async () => {
  const { standin, gw, client, account, debits } = await setup();
  const { voiceId } = await client.voices.ivc.create({ name: 'Narrator', files: [new File([wav(500)], 'a.wav', { type: 'audio/wav' })] });
  assert.equal(standin.voices.size, 1, 'one voice cloned at the upstream');
  const [upstreamId, upstreamVoice] = [...standin.voices.entries()][0];
  assert.equal(upstreamVoice.name, 'Narrator');
  assert.ok(upstreamVoice.samples[0].equals(wav(500)), 'the sample reached the upstream whole');
  assert.notEqual(voiceId, upstreamId, 'the account sees Tollgate\'s id, not the upstream\'s');

  const text = 'My own voice.';
  const audio = await bytes(await client.textToSpeech.convert(voiceId, { text, outputFormat: 'pcm_24000' }));
  assert.ok(audio.equals(audioOf(text, 'pcm_24000').body));
  const call = standin.requests.find((r) => r.path.startsWith('/v1/text-to-speech/'));
  assert.equal(call.path, `/v1/text-to-speech/${upstreamId}`);
  assert.equal(call.json.model_id, 'eleven_multilingual_v2', 'a cloned voice speaks with its clone model');
  const [row] = await debits(1);
  assert.equal(row.model, 'eleven-clone');
  assert.equal(row.amount, charCost(text.length, 150));

  // Another account cannot reach it, even knowing the upstream's id.
  const other = await gw.account('5');
  const otherClient = new ElevenLabsClient({ apiKey: other.key, baseUrl: `${gw.url}/beta`, maxRetries: 0 });
  for (const id of [voiceId, upstreamId]) {
    await assert.rejects(otherClient.textToSpeech.convert(id, { text }), (e) => e instanceof ElevenLabsError && e.statusCode === 404);
  }

  assert.equal((await client.voices.delete(voiceId)).status, 'ok');
  assert.equal(standin.voices.size, 0, 'deleted at the upstream too');
  assert.ok(standin.requests.some((r) => r.method === 'DELETE' && r.path === `/v1/voices/${upstreamId}` && r.headers['xi-api-key'] === UPSTREAM_KEY));
  await assertInvariants(assert, gw, account);
});

test('speech to speech and speech to text go to ElevenLabs as sent and are billed by the seconds Tollgate measured', async () => {
  const { standin, gw, client, account, debits } = await setup();
  const out = await bytes(await client.speechToSpeech.convert(GEORGE, {
    audio: new File([wav(1000)], 'in.wav', { type: 'audio/wav' }), modelId: 'eleven_multilingual_sts_v2', outputFormat: 'pcm_16000', removeBackgroundNoise: true,
  }));
  assert.ok(out.equals(audioOf('converted speech', 'pcm_16000').body));
  const sts = standin.requests.find((r) => r.path.startsWith('/v1/speech-to-speech/'));
  assert.equal(sts.path, `/v1/speech-to-speech/${GEORGE}`);
  assert.equal(sts.headers['xi-api-key'], UPSTREAM_KEY);
  assert.deepEqual(sts.form.fields.model_id, ['eleven_multilingual_sts_v2']);
  assert.deepEqual(sts.form.fields.remove_background_noise, ['true']);
  assert.ok(sts.form.files[0].data.equals(wav(1000)));

  // Speech the stand-in made, as a WAV: it transcribes back to its text.
  const said = 'round trip';
  const pcm = audioOf(said, 'pcm_24000').body;
  const file = wavFile(pcm, 24000);
  const result = await client.speechToText.convert({ modelId: 'scribe_v1', file: new File([file], 'speech.wav', { type: 'audio/wav' }), tagAudioEvents: false });
  assert.equal(result.text, said);
  assert.equal(result.languageCode, 'eng');
  assert.deepEqual(result.words.filter((w) => w.type === 'word').map((w) => w.text), ['round', 'trip']);
  const stt = standin.requests.find((r) => r.path === '/v1/speech-to-text');
  assert.deepEqual(stt.form.fields.model_id, ['scribe_v1'], 'the alias is resolved to the model\'s upstream name');
  assert.deepEqual(stt.form.fields.tag_audio_events, ['false']);

  const [conv, tr] = await debits(2);
  assert.equal(conv.usage.audio_seconds_in, 1);
  assert.equal(conv.amount, secondsCost(1000, 300_000_000n));
  const ms = pcm.length / 48;
  assert.equal(tr.usage.audio_seconds_in, ms / 1000);
  assert.equal(tr.amount, secondsCost(ms, 400_000_000n));
  await assertInvariants(assert, gw, account);
});

test('an ElevenLabs upstream\'s refusal bills nothing, a reply cut after audio bills the text (partial), a JSON reply cut bills nothing; OpenAI-shaped routes never reach it', async () => {
  const { standin, gw, client, key, account, debits } = await setup();
  // A stream cut by the upstream after audio reached the client: the client sees it break, the text is billed (partial).
  const cut = 'This reply breaks off [cut] midway.';
  await assert.rejects(bytes(await client.textToSpeech.stream(GEORGE, { text: cut, modelId: 'eleven_flash_v2_5', outputFormat: 'pcm_16000' })));
  const [row] = await debits(1);
  assert.equal(row.usage.characters, cut.length);
  assert.equal(row.usage.basis, 'partial');
  assert.equal(row.amount, charCost(cut.length, 75));
  const before = (await gw.cli('account', 'show', account)).balance;
  // A with-timestamps JSON cut short cannot be read: nothing is billed for it.
  await assert.rejects(client.textToSpeech.convertWithTimestamps(GEORGE, { text: cut, modelId: 'eleven_flash_v2_5' }), (e) => e instanceof ElevenLabsError && e.statusCode === 502);
  standin.requests.length = 0;
  // The OpenAI-shaped speech route cannot send its contract to ElevenLabs' API.
  const res = await gw.fetch('/v1/audio/speech', { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'eleven_multilingual_v2', input: 'hi', voice: 'alloy' }) });
  assert.equal(res.status, 400);
  assert.equal((await res.json()).error.code, 'not_offered');
  assert.equal(standin.requests.length, 0, 'nothing reached the upstream');
  // The upstream refuses (a stand-in voice it does not know after a restart): nothing billed.
  standin.voices.clear();
  const { voiceId } = await client.voices.ivc.create({ name: 'Gone', files: [new File([wav(300)], 'a.wav', { type: 'audio/wav' })] });
  standin.voices.clear();
  await assert.rejects(client.textToSpeech.convert(voiceId, { text: 'hello' }), (e) => e instanceof ElevenLabsError && e.statusCode >= 400);
  // The operator's key no longer taken by ElevenLabs: the host's fault, a 502 that bills nothing (and does not echo the upstream's body).
  standin.apiKey = 'sk_rotated';
  try {
    await assert.rejects(client.textToSpeech.convert(GEORGE, { text: 'hello' }), (e) => e instanceof ElevenLabsError && e.statusCode === 502
      && e.body.detail.status === 'upstream_error' && !JSON.stringify(e.body).includes('Invalid API key'));
  } finally { standin.apiKey = UPSTREAM_KEY; }
  assert.equal((await gw.cli('account', 'show', account)).balance, before, 'nothing was billed');
  await assertInvariants(assert, gw, account);
});

test('stream-input is relayed socket to socket: frames as sent without the user\'s key, audio back as the upstream sent it, each spoken character billed once', async () => {
  const { standin, gw, key, account, debits } = await setup();
  const url = `${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${GEORGE}/stream-input?model_id=eleven_flash_v2_5&output_format=pcm_16000&inactivity_timeout=30`;
  const s = await connect(url);
  const parts = ['Hello there. ', 'Second part.'];
  s.send({ text: ' ', voice_settings: { stability: 0.5, similarity_boost: 0.8 }, generation_config: { chunk_length_schedule: [50] }, xi_api_key: key });
  s.send({ text: parts[0], try_trigger_generation: true });
  const first = await s.until((f) => typeof f.audio === 'string');
  s.send({ text: parts[1], flush: true });
  await s.until((f) => typeof f.audio === 'string' && f.alignment.chars.join('') === parts[1]);
  s.send({ text: '' });
  await s.until((f) => f.isFinal === true);
  assert.equal((await s.closed).code, 1000);

  // The client got the upstream's frames untouched.
  assert.ok(Buffer.from(first.audio, 'base64').equals(audioOf(parts[0], 'pcm_16000').body));
  assert.deepEqual(first.alignment.chars, [...parts[0]]);
  assert.deepEqual(first.normalizedAlignment.charStartTimesMs, [...parts[0]].map((_, i) => i * 60));

  // The stand-in got the operator's key at the upgrade, the model's upstream name, and the frames without the user's key.
  const [seen] = standin.sockets;
  assert.equal(seen.headers['xi-api-key'], UPSTREAM_KEY);
  assert.equal(seen.query.model_id, 'eleven_flash_v2_5');
  assert.equal(seen.query.output_format, 'pcm_16000');
  assert.deepEqual(seen.frames, [
    { text: ' ', voice_settings: { stability: 0.5, similarity_boost: 0.8 }, generation_config: { chunk_length_schedule: [50] } },
    { text: parts[0], try_trigger_generation: true }, { text: parts[1], flush: true }, { text: '' },
  ]);
  assert.ok(!JSON.stringify(seen).includes(key), 'the user\'s key never reaches the upstream');

  // One debit per stretch of audio, for the characters sent before it: together every spoken character once.
  const rows = await debits(2);
  assert.deepEqual(rows.map((r) => r.usage.characters), parts.map((p) => p.length));
  assert.deepEqual(rows.map((r) => r.amount), parts.map((p) => charCost(p.length, 75)));
  assert.ok(rows.every((r) => r.model === 'eleven_flash_v2_5' && r.reason === 'beta.tts.stream_input'));
  await assertInvariants(assert, gw, account);
});

test('a relayed stream-input socket the client drops is billed for the text spoken before it, not for text never spoken, and holds nothing after', async () => {
  const { standin, gw, key, account, debits } = await setup();
  const url = `${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${GEORGE}/stream-input?model_id=eleven_flash_v2_5&output_format=pcm_16000`;
  const s = await connect(url, { headers: { 'xi-api-key': key } });
  s.send({ text: ' ' });
  s.send({ text: 'Spoken words. ', flush: true });
  await s.until((f) => typeof f.audio === 'string');
  s.send({ text: 'never spoken because the client leaves' });
  // the frame reached the upstream (held, not yet spoken), then the client goes
  for (let i = 0; i < 100 && standin.sockets[0]?.frames.length < 3; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(standin.sockets[0].frames.length, 3);
  s.ws.terminate();
  const rows = await debits(1);
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal((await debits(1)).length, 1, 'one debit: the spoken text only');
  assert.equal(rows[0].usage.characters, 'Spoken words. '.length);
  assert.equal(rows[0].amount, charCost('Spoken words. '.length, 75));
  await assertInvariants(assert, gw, account);
});

test('a relayed stream-input session whose balance runs out is closed 1008 before the text goes on, billed what was spoken', async () => {
  const { standin, gw } = await setup();
  const { key, account } = await gw.account('0.001'); // 1,000,000 nanodollars: 13 characters at $75 per million
  const url = `${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${GEORGE}/stream-input?model_id=eleven_flash_v2_5&output_format=pcm_16000`;
  const s = await connect(url, { headers: { 'xi-api-key': key } });
  s.send({ text: ' ' });
  s.send({ text: 'Ten chars.', flush: true });
  await s.until((f) => typeof f.audio === 'string');
  s.send({ text: 'This is more than the balance covers.', flush: true });
  const closed = await s.closed;
  assert.equal(closed.code, 1008);
  assert.match(closed.reason + JSON.stringify(s.frames), /insufficient_balance/);
  assert.equal(standin.sockets.at(-1).frames.length, 2, 'the text it could not pay for never reached the upstream');
  const show = await gw.cli('account', 'show', account);
  assert.equal(show.balance, 0.00025, 'billed the ten characters spoken: 750,000 nanodollars');
  await assertInvariants(assert, gw, account);
});

test('the config takes protocol elevenlabs only with a base_url and only for speech models; the default protocol is openai', async () => {
  const { loadConfigFile } = await import('../dist/config.js');
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-config-'));
  const load = (upstream, model) => {
    const path = join(dir, 'c.json');
    writeFileSync(path, JSON.stringify({ upstreams: { up: upstream }, models: [model], payments: { provider: 'sandbox', allow_sandbox: true } }));
    return loadConfigFile(path, { KEY: 'k' });
  };
  const tts = { id: 't', upstream: 'up', kind: 'tts', per_mchar: '1' };
  try {
    assert.equal(load({ base_url: 'https://api.elevenlabs.io', protocol: 'elevenlabs', api_key_env: 'KEY' }, tts).upstreams.get('up').protocol, 'elevenlabs');
    assert.equal(load({ base_url: 'http://127.0.0.1:1' }, tts).upstreams.get('up').protocol, 'openai');
    assert.throws(() => load({ sim: {}, protocol: 'elevenlabs' }, tts), /\/upstreams\/up\/protocol: an elevenlabs upstream needs base_url/);
    assert.throws(() => load({ base_url: 'https://api.elevenlabs.io', protocol: 'elevenlabs' }, { id: 'c', upstream: 'up', kind: 'chat', input_per_mtok: '1', output_per_mtok: '1' }),
      /\/models\/0\/kind: an elevenlabs upstream serves only tts, stt and sts models/);
    assert.throws(() => load({ base_url: 'https://api.elevenlabs.io', protocol: 'grpc' }, tts), /\/upstreams\/up\/protocol/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const multiUrl = (gw, query = '') => `${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${GEORGE}/multi-stream-input?model_id=eleven_flash_v2_5&output_format=pcm_16000${query}`;
/** The text a context's audio frames spell (their alignments), as the client received them. */
const spokenIn = (frames, id) => frames.filter((f) => typeof f.audio === 'string' && f.contextId === id).map((f) => f.alignment.chars.join('')).join('');

test('multi-stream-input is relayed socket to socket: contexts opened, flushed and closed upstream, each context\'s text billed on its own parts, its final message saying its cost', async () => {
  const { standin, gw, key, account, debits } = await setup();
  const s = await connect(multiUrl(gw, '&inactivity_timeout=30'));
  const [a1, a2, b1, b2, c1] = ['Alpha one. ', 'Alpha two. ', 'Bravo two words. ', 'Spoken at the end. ', 'Dropped text. '];
  s.send({ text: ' ', context_id: 'a', voice_settings: { stability: 0.5, similarity_boost: 0.8 }, xi_api_key: key });
  s.send({ text: ' ', context_id: 'b' });
  s.send({ text: a1, context_id: 'a' });
  s.send({ text: b1, context_id: 'b', flush: true });
  s.send({ text: a2, context_id: 'a', flush: true });
  await s.until((f) => f.isFinal === undefined && spokenIn(s.frames, 'a') === a1 + a2);
  s.send({ context_id: 'a', close_context: true });
  const finalA = await s.until((f) => f.isFinal === true && f.contextId === 'a');
  // A context whose text was never flushed: closing it drops the text, and bills nothing.
  s.send({ text: ' ', context_id: 'c' });
  s.send({ text: c1, context_id: 'c' });
  s.send({ context_id: 'c', close_context: true });
  const finalC = await s.until((f) => f.isFinal === true && f.contextId === 'c');
  s.send({ text: '', context_id: 'b' }); // keeps it alive
  s.send({ text: b2, context_id: 'b' });
  s.send({ close_socket: true });
  const finalB = await s.until((f) => f.isFinal === true && f.contextId === 'b');
  assert.equal((await s.closed).code, 1000);

  // The client got the upstream's audio frames untouched, each naming its context.
  assert.equal(spokenIn(s.frames, 'a'), a1 + a2);
  assert.equal(spokenIn(s.frames, 'b'), b1 + b2);
  assert.equal(spokenIn(s.frames, 'c'), '');
  const firstB = s.frames.find((f) => f.contextId === 'b' && typeof f.audio === 'string');
  assert.ok(Buffer.from(firstB.audio, 'base64').equals(audioOf('Bravo ', 'pcm_16000').body));

  // The stand-in got the operator's key, the model's upstream name, and every frame as sent without the user's key.
  const [seen] = standin.sockets;
  assert.equal(seen.path, `/v1/text-to-speech/${GEORGE}/multi-stream-input`);
  assert.equal(seen.headers['xi-api-key'], UPSTREAM_KEY);
  assert.equal(seen.query.model_id, 'eleven_flash_v2_5');
  assert.deepEqual(seen.frames[0], { text: ' ', context_id: 'a', voice_settings: { stability: 0.5, similarity_boost: 0.8 } });
  assert.equal(seen.frames.length, 12, 'every message went on, the keep-alive and the closes included');
  assert.deepEqual(seen.frames.at(-1), { close_socket: true });
  assert.ok(!JSON.stringify(seen).includes(key), 'the user\'s key never reaches the upstream');

  // One debit per stretch of a context's text the upstream spoke: a (both its messages), b twice; nothing for c.
  const rows = await debits(3);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await debits(3)).length, 3);
  const of = (id) => rows.filter((r) => r.usage.context_id === id);
  assert.deepEqual(of('a').map((r) => r.usage.characters), [(a1 + a2).length]);
  assert.deepEqual(of('b').map((r) => r.usage.characters), [b1.length, b2.length]);
  assert.deepEqual(rows.map((r) => r.amount).sort(), [charCost((a1 + a2).length, 75), charCost(b1.length, 75), charCost(b2.length, 75)].sort());
  assert.ok(rows.every((r) => r.model === 'eleven_flash_v2_5' && r.reason === 'beta.tts.multi_stream_input' && r.usage.upstream === 'elevenlabs'));
  // Each context's final message says what its parts were billed.
  const dollars = (nano) => Number(nano) / 1e9;
  assert.equal(finalA.cost, dollars(charCost((a1 + a2).length, 75)));
  assert.equal(finalB.cost, dollars(charCost(b1.length, 75) + charCost(b2.length, 75)));
  assert.equal(finalC.cost, 0);
  await assertInvariants(assert, gw, account);
});

test('a relayed multi-stream-input socket the client drops mid-generation is billed the text of the audio under way, not text never spoken, and holds nothing after', async () => {
  const { standin, gw, key, account, debits } = await setup();
  const s = await connect(multiUrl(gw), { headers: { 'xi-api-key': key } });
  const long = 'one two three four five six seven eight nine ten eleven twelve ';
  s.send({ text: ' ', context_id: 'talk' });
  s.send({ text: ' ', context_id: 'later' });
  s.send({ text: 'never spoken because the client leaves ', context_id: 'later' });
  s.send({ text: long, context_id: 'talk', flush: true });
  await s.until((f) => typeof f.audio === 'string' && f.contextId === 'talk');
  s.ws.terminate();
  const rows = await debits(1);
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal((await debits(1)).length, 1, 'one debit: the generation under way');
  assert.equal(rows[0].usage.characters, long.length);
  assert.equal(rows[0].usage.context_id, 'talk');
  assert.equal(rows[0].amount, charCost(long.length, 75));
  const words = standin.sockets[0].frames.length;
  assert.equal(words, 4, 'every frame reached the upstream before the client left');
  await assertInvariants(assert, gw, account);
});

test('a relayed multi-stream-input session whose balance runs out is closed 1008 before the text goes on, saying what it was billed', async () => {
  const { standin, gw } = await setup();
  const { key, account } = await gw.account('0.001'); // 1,000,000 nanodollars: 13 characters at $75 per million
  const s = await connect(multiUrl(gw), { headers: { 'xi-api-key': key } });
  s.send({ text: ' ', context_id: 'a' });
  s.send({ text: 'Ten chars.', context_id: 'a', flush: true });
  await s.until((f) => typeof f.audio === 'string');
  s.send({ text: ' ', context_id: 'b' });
  s.send({ text: 'This is more than the balance covers.', context_id: 'b', flush: true });
  const closed = await s.closed;
  assert.equal(closed.code, 1008);
  const said = closed.reason + JSON.stringify(s.frames);
  assert.match(said, /insufficient_balance/);
  assert.match(said, /This session was billed \$0\.00075 \(750000 nd\) in all/);
  assert.equal(standin.sockets.at(-1).frames.length, 3, 'the text it could not pay for never reached the upstream');
  assert.equal((await gw.cli('account', 'show', account)).balance, 0.00025, 'billed the ten characters spoken: 750,000 nanodollars');
  await assertInvariants(assert, gw, account);
});

test('ElevenLabs\' errors keep their meaning: 404 names the voice or model, 400/422 keep the upstream\'s message, 401/403 are the gateway\'s 502, nothing billed', async () => {
  const { standin, gw, client, account } = await setup();
  const before = (await gw.cli('account', 'show', account)).balance;
  const rejects = (p, status, check) => assert.rejects(p, (e) => {
    assert.ok(e instanceof ElevenLabsError, String(e));
    assert.equal(e.statusCode, status, JSON.stringify(e.body));
    check(e);
    return true;
  });
  // A voice ElevenLabs does not have: 404 naming it.
  await rejects(client.textToSpeech.convert(ADAM, { text: 'hello', modelId: 'eleven_flash_v2_5' }), 404, (e) => {
    assert.equal(e.body.detail.status, 'voice_not_found');
    assert.match(e.body.detail.message, new RegExp(`voice_id '${ADAM}' was not found`));
  });
  // A model it does not have: 404 naming it.
  await rejects(client.textToSpeech.stream(GEORGE, { text: 'hello', modelId: 'eleven_retired' }), 404, (e) => {
    assert.equal(e.body.detail.status, 'model_not_found');
    assert.match(e.body.detail.message, /model_id 'eleven_monolingual_v1' was not found/);
  });
  // Its validation: the same status, its message (it is about the client's input).
  standin.failures.push({ status: 400, body: { detail: { status: 'invalid_request', message: 'The text contains no speakable characters.' } } });
  await rejects(client.textToSpeech.convert(GEORGE, { text: '...', modelId: 'eleven_flash_v2_5' }), 400, (e) => {
    assert.equal(e.body.detail.status, 'upstream_invalid_request');
    assert.equal(e.body.detail.message, 'The text contains no speakable characters.');
  });
  standin.failures.push({ status: 422, body: { detail: [{ loc: ['body', 'voice_settings', 'stability'], msg: 'Input should be less than or equal to 1', type: 'less_than_equal' }] } });
  await rejects(client.textToSpeech.convertWithTimestamps(GEORGE, { text: 'hello', modelId: 'eleven_flash_v2_5' }), 422, (e) => {
    assert.equal(e.constructor.name, 'UnprocessableEntityError');
    assert.deepEqual(e.body.detail, [{ loc: ['body', 'voice_settings', 'stability'], msg: 'Input should be less than or equal to 1', type: 'less_than_equal' }]);
  });
  // The operator's key refused (401) or short of a permission (403): the gateway's fault, a 502 saying so, never a 401.
  standin.apiKey = 'sk_rotated';
  try {
    await rejects(client.textToSpeech.convert(GEORGE, { text: 'hello', modelId: 'eleven_flash_v2_5' }), 502, (e) => {
      assert.equal(e.body.detail.status, 'upstream_error');
      assert.match(e.body.detail.message, /refused the gateway's own credentials .*status 401.*not your API key/);
      assert.ok(!JSON.stringify(e.body).includes('Invalid API key'));
    });
  } finally { standin.apiKey = UPSTREAM_KEY; }
  standin.failures.push({ status: 403, body: { detail: { status: 'missing_permissions', message: 'The API key you used is missing the permission text_to_speech.' } } });
  await rejects(client.speechToText.convert({ modelId: 'scribe_v1', file: new File([wav(500)], 'a.wav', { type: 'audio/wav' }) }), 502, (e) => {
    assert.match(e.body.detail.message, /refused the gateway's own credentials .*status 403/);
  });
  assert.equal((await gw.cli('account', 'show', account)).balance, before, 'nothing was billed');
  await assertInvariants(assert, gw, account);
});

test('an ElevenLabs 429 is retried on another upstream of the pool; with none, the client gets 429 with the upstream\'s Retry-After', async () => {
  const { standin, standin2, gw, client, account, debits } = await setup();
  const busy = (retryAfter) => ({ status: 429, headers: { 'retry-after': retryAfter },
    body: { detail: { status: 'too_many_concurrent_requests', message: 'Too many concurrent requests for your subscription.' } } });
  standin2.failures.push(busy('1'));
  const text = 'Retried elsewhere.';
  const audio = await bytes(await client.textToSpeech.convert(GEORGE, { text, modelId: 'eleven_pooled', outputFormat: 'pcm_16000' }));
  assert.ok(audio.equals(audioOf(text, 'pcm_16000').body));
  assert.equal(standin2.requests.length, 1, 'the first upstream answered 429');
  assert.equal(standin.requests.length, 1, 'the other answered');
  const [row] = await debits(1);
  assert.equal(row.amount, charCost(text.length, 75), 'billed once');

  const before = (await gw.cli('account', 'show', account)).balance;
  standin2.failures.push(busy('7'));
  await assert.rejects(client.textToSpeech.convert(GEORGE, { text, modelId: 'eleven_solo' }), (e) => {
    assert.ok(e instanceof ElevenLabsError);
    assert.equal(e.statusCode, 429);
    assert.equal(e.body.detail.status, 'upstream_rate_limited');
    assert.equal(e.rawResponse.headers.get('retry-after'), '7');
    assert.equal(e.rawResponse.headers.get('retry-after-ms'), '7000');
    return true;
  });
  assert.equal((await gw.cli('account', 'show', account)).balance, before, 'nothing billed for the 429');
  await assertInvariants(assert, gw, account);
});

test('on the relayed sockets an ElevenLabs error message or refusal becomes the family\'s socket error, billing nothing for unspoken text', async () => {
  const { standin, gw, key, account } = await setup();
  const before = (await gw.cli('account', 'show', account)).balance;
  // stream-input: ElevenLabs says the voice is gone mid-session.
  const url = `${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${GEORGE}/stream-input?model_id=eleven_flash_v2_5&output_format=pcm_16000`;
  let s = await connect(url, { headers: { 'xi-api-key': key } });
  s.send({ text: ' ' });
  s.send({ text: 'gone [error:voice_not_found] ', flush: true });
  let closed = await s.closed;
  assert.equal(closed.code, 1008);
  const frame = s.frames.find((f) => f.error);
  assert.equal(frame.error, 'voice_not_found');
  assert.equal(frame.code, 1008);
  assert.match(frame.message, /does not know what this request names/);
  // multi-stream-input: ElevenLabs limits the gateway.
  s = await connect(multiUrl(gw), { headers: { 'xi-api-key': key } });
  s.send({ text: ' ', context_id: 'a' });
  s.send({ text: 'busy [error:rate_limit_exceeded] ', context_id: 'a', flush: true });
  closed = await s.closed;
  assert.equal(closed.code, 1008);
  assert.equal(s.frames.find((f) => f.error)?.error ?? closed.reason.split(':')[0], 'upstream_rate_limited');
  // The operator's key refused at the upgrade: the gateway's fault (1011), never the client's key.
  standin.apiKey = 'sk_rotated';
  try {
    s = await connect(multiUrl(gw), { headers: { 'xi-api-key': key } });
    s.send({ text: ' ', context_id: 'a' });
    closed = await s.closed;
  } finally { standin.apiKey = UPSTREAM_KEY; }
  assert.equal(closed.code, 1011);
  const told = closed.reason + JSON.stringify(s.frames);
  assert.match(told, /upstream_error/);
  assert.match(told, /gateway's own credentials/);
  assert.ok(!/invalid_api_key/.test(told));
  assert.equal((await gw.cli('account', 'show', account)).balance, before, 'nothing was billed');
  await assertInvariants(assert, gw, account);
});

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
];

// One stand-in and one gateway serve every test (a gateway start costs seconds on a busy machine); each test has its
// own account and starts with the stand-in's record and voices cleared.
let shared = null;
const teardown = [];
before(async () => {
  const hooks = { after: (fn) => teardown.push(fn) };
  const standin = await startElevenLabs(hooks, UPSTREAM_KEY);
  const gw = await startGateway(hooks, {
    store: 'postgres',
    upstreams: { sim: { sim: {} }, eleven: { base_url: standin.url, protocol: 'elevenlabs', api_key_env: 'TEST_ELEVENLABS_KEY' } },
    models: MODELS, env: { TEST_ELEVENLABS_KEY: UPSTREAM_KEY },
  });
  const db = new pg.Client({ connectionString: gw.db.url });
  db.on('error', () => undefined); // the database is dropped with FORCE at the end
  await db.connect();
  teardown.push(() => db.end().catch(() => undefined));
  shared = { standin, gw, db };
});
after(async () => { for (const fn of teardown.reverse()) await fn(); });

async function setup() {
  const { standin, gw, db } = shared;
  standin.requests.length = 0;
  standin.sockets.length = 0;
  standin.voices.clear();
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
  return { standin, gw, client, ...acct, debits };
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

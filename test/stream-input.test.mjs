// WS /beta/v1/text-to-speech/{voice_id}/stream-input with a raw `ws` client: admission at the upgrade,
// the key in the first frame, refusals, malformed frames, the session's concurrency slot, shutdown.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, assertInvariants, TEST_MODELS, balanceNano } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';
import { hasFfmpeg, oggPages, probeAudio } from './helpers/audio.mjs';

const MODELS = TEST_MODELS.some((m) => m.kind === 'tts') ? TEST_MODELS
  : [...TEST_MODELS, { id: 'sim-tts', upstream: 'sim', kind: 'tts', simulated: true, per_mchar: '15' }];
const OPTS = { store: 'pglite', models: MODELS };

// One gateway serves every test but the shutdown one (each test has accounts of its own): a gateway
// start costs seconds on a busy machine, and the file as a whole has a time limit.
let shared = null;
const teardown = [];
before(async () => { shared = await startGateway({ after: (fn) => teardown.push(fn) }, OPTS); });
after(async () => { for (const fn of teardown.reverse()) await fn(); });
const gateway = async () => shared;

const VOICE = 'JBFqnCBsd6RMkjVDRZzb';

function wsUrl(gw, query = '') {
  return `${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${VOICE}/stream-input${query ? `?${query}` : ''}`;
}

test('an upgrade with a wrong key, a key without the voice scope, or no balance is an HTTP error in the beta envelope, before any socket', async () => {
  const gw = await gateway();
  const bad = await connect(wsUrl(gw, 'output_format=pcm_16000'), { 'xi-api-key': 'svc_live_notarealkeyatall0000000000000000000' });
  assert.equal(bad.refused?.status, 401);
  assert.equal(bad.refused.body.detail.status, 'invalid_api_key');
  const { key: llmOnly } = await gw.account('1', { scopes: 'llm' });
  const scoped = await connect(wsUrl(gw, 'output_format=pcm_16000'), { 'xi-api-key': llmOnly });
  assert.equal(scoped.refused?.status, 403);
  assert.equal(scoped.refused.body.detail.status, 'insufficient_scope');
  const { key: broke, account } = await gw.account('0');
  const poor = await connect(wsUrl(gw, 'output_format=pcm_16000'), { 'xi-api-key': broke });
  assert.equal(poor.refused?.status, 402);
  assert.equal(poor.refused.body.detail.status, 'insufficient_balance');
  await assertInvariants(assert, gw, account);
});

test('with no key at the upgrade, the first frame must carry one: none closes with 1008 naming the key', async () => {
  const gw = await gateway();
  const s = await connect(wsUrl(gw, 'output_format=pcm_16000'));
  assert.ok(s.ws, 'the upgrade needs no key (it may come in the first frame)');
  s.ws.send(JSON.stringify({ text: ' ' }));
  const { code, reason } = await s.closed;
  assert.equal(code, 1008);
  assert.match(reason + JSON.stringify(s.frames), /invalid_api_key/);
});

test('the key in the first frame (xi_api_key) opens the session; a malformed frame gets an error message and the session goes on', async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const s = await connect(wsUrl(gw, 'output_format=pcm_16000'));
  s.ws.send(JSON.stringify({ text: ' ', xi_api_key: key, generation_config: { chunk_length_schedule: [120] } }));
  s.ws.send('{"text": "not json');
  s.ws.send(JSON.stringify({ text: '' }));
  const { code } = await s.closed;
  assert.equal(code, 1000, 'a normal close after {"text": ""}');
  assert.equal(s.frames[0].error, 'invalid_message', 'the malformed frame was answered');
  assert.deepEqual(s.frames.at(-1), finalOf(0n), 'nothing spoken: its cost is 0');
  await assertInvariants(assert, gw, account);
});

test('an output_format outside the family\'s enumeration closes the socket with 1008 and says why', async () => {
  const gw = await gateway();
  const { key } = await gw.account('1');
  const s = await connect(wsUrl(gw, 'output_format=wav_99'), { 'xi-api-key': key });
  const { code, reason } = await s.closed;
  assert.equal(code, 1008);
  assert.equal(reason, 'invalid output_format');
  assert.match(s.frames[0].message, /output_format "wav_99" is unknown; use one of mp3_22050_32/);
});

test('a session holds one concurrency slot for its life: a second one is refused with 429 until the first closes', async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1', { concurrency: 1 });
  const first = await connect(wsUrl(gw, 'output_format=pcm_16000'), { 'xi-api-key': key });
  assert.ok(first.ws);
  const second = await connect(wsUrl(gw, 'output_format=pcm_16000'), { 'xi-api-key': key });
  assert.equal(second.refused?.status, 429);
  assert.equal(second.refused.body.detail.status, 'concurrency_limit_exceeded');
  first.ws.send(JSON.stringify({ text: ' ' }));
  first.ws.send(JSON.stringify({ text: '' }));
  await first.closed;
  let third;
  for (let i = 0; i < 40; i++) {
    third = await connect(wsUrl(gw, 'output_format=pcm_16000'), { 'xi-api-key': key });
    if (third.ws) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(third.ws, 'the slot is free once the first session closed');
  third.ws.close();
  await third.closed;
  await assertInvariants(assert, gw, account);
});

test('a session with no text for its inactivity_timeout is closed with 1008; SIGTERM closes the others with 1001', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key } = await gw.account('1');
  const idle = await connect(wsUrl(gw, 'output_format=pcm_16000&inactivity_timeout=1'), { 'xi-api-key': key });
  idle.ws.send(JSON.stringify({ text: ' ' }));
  const c1 = await idle.closed;
  assert.equal(c1.code, 1008);
  assert.match(c1.reason, /inactivity_timeout/);
  const open = await connect(wsUrl(gw, 'output_format=pcm_16000'), { 'xi-api-key': key });
  open.ws.send(JSON.stringify({ text: ' ' }));
  await new Promise((r) => setTimeout(r, 100));
  gw.proc.kill('SIGTERM');
  const c2 = await open.closed;
  assert.equal(c2.code, 1001);
});

/** Sends frames in order and collects every server frame until the close. */
async function session(gw, query, headers, frames, { dropAfterAudio = 0 } = {}) {
  const s = await connect(wsUrl(gw, query), headers);
  assert.ok(s.ws, `upgraded: ${JSON.stringify(s.refused)}`);
  for (const f of frames) s.ws.send(typeof f === 'string' ? f : JSON.stringify(f));
  if (dropAfterAudio) {
    while (s.frames.filter((f) => f.audio).length < dropAfterAudio) await new Promise((r) => setTimeout(r, 10));
    s.ws.terminate();
  }
  const close = await s.closed;
  return { ...close, frames: s.frames };
}

/** The test model's price: $15 per million characters = 15,000 nanodollars a character. */
const PER_CHAR = 15_000n;
/** The final message: `isFinal` with `cost`, the dollars the session was billed (a JSON number, exactly its debits). */
const finalOf = (nano) => ({ audio: null, isFinal: true, normalizedAlignment: null, alignment: null, cost: Number(nano) / 1e9 });

/**
 * The audio frames of each generation, in order (audio is relayed as the upstream makes it: a
 * generation is one or more frames, and its frames' alignments spell its text).
 */
function byGeneration(frames, texts) {
  const audio = frames.filter((f) => f.audio);
  let i = 0;
  const groups = texts.map((text) => {
    const group = [];
    let said = '';
    while (said !== text && i < audio.length) { const f = audio[i++]; group.push(f); said += f.alignment?.chars.join('') ?? ''; }
    assert.equal(said, text, 'the frames of a generation spell its text');
    return group;
  });
  assert.equal(i, audio.length, 'no audio beyond the generations');
  return groups;
}

test('text streamed in is generated on the chunk schedule and on flush, with alignment, and billed per character synthesized', async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const first = 'Streaming speech arrives while the text is still being written by the model. ';
  const second = 'And this is flushed. ';
  const r = await session(gw, 'output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key }, [
    { text: ' ', generation_config: { chunk_length_schedule: [50] } },
    { text: first },
    { text: second, flush: true },
    { text: '' },
  ]);
  assert.equal(r.code, 1000);
  const audio = r.frames.filter((f) => f.audio);
  assert.ok(audio.length >= 2, `${audio.length} audio frames`);
  assert.equal(audio.map((f) => f.alignment?.chars.join('') ?? '').join(''), first + second, 'alignment covers exactly the text synthesized');
  // The first text passes the schedule's 50 characters (cut at its last space: all of it), the second is flushed: each relayed in frames as it is made.
  const gens = byGeneration(r.frames, [first, second]);
  assert.ok(gens.some((g) => g.length > 1), `audio relayed as it is made: ${gens.map((g) => g.length)} frames a generation`);
  for (const f of audio) {
    const pcm = Buffer.from(f.audio, 'base64');
    const ms = (pcm.length / 2 / 16_000) * 1000;
    const a = f.alignment;
    if (!a) continue;
    const end = a.charStartTimesMs.at(-1) + a.charsDurationsMs.at(-1);
    assert.ok(Math.abs(end - ms) <= 2, `alignment ends at ${end} ms, the frame's 16 kHz audio lasts ${ms} ms`);
    assert.deepEqual(f.normalizedAlignment, f.alignment);
  }
  const chars = BigInt([...(first + second)].length);
  assert.deepEqual(r.frames.at(-1), finalOf(chars * PER_CHAR), 'the final message carries what the session was billed');
  assert.equal(before - (await balanceNano(gw, account)), chars * PER_CHAR, 'billed exactly the characters synthesized');
  await assertInvariants(assert, gw, account);
});

test('a socket dropped after the first generation is billed for what was generated and no more', async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const said = 'The first sentence is generated and heard. ';
  const r = await session(gw, 'output_format=ulaw_8000&model_id=sim-tts', { 'xi-api-key': key }, [
    { text: ' ' }, { text: said, flush: true }, { text: 'This one never gets flushed before the client leaves ' },
  ], { dropAfterAudio: 1 });
  assert.notEqual(r.code, 1000);
  // The generation under way when the client left stops there: billed the characters of the audio
  // sent (at least what the client heard), never the text that was not flushed.
  const heard = BigInt(r.frames.filter((f) => f.audio).reduce((n, f) => n + f.alignment.chars.length, 0));
  let now = await balanceNano(gw, account);
  for (let i = 0; i < 40 && before === now; i++) { await new Promise((x) => setTimeout(x, 50)); now = await balanceNano(gw, account); }
  await assertInvariants(assert, gw, account);
  now = await balanceNano(gw, account);
  assert.ok(before - now >= heard * PER_CHAR, `billed ${before - now} nd, at least the ${heard} characters heard`);
  assert.ok(before - now <= BigInt([...said].length) * PER_CHAR, `billed ${before - now} nd, at most the flushed sentence`);
});

test('a client that leaves mid-generation stops it: billed the characters of the audio sent, not the whole text', async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  // sim speaks slowly here (150 ms a piece): the client has heard the first frame long before the end
  const text = 'A long sentence that the client will not stay to hear to its end, spoken slowly piece by piece by the simulated upstream. ';
  const r = await session(gw, 'output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key, 'x-sim-token-delay-ms': '150' }, [
    { text: ' ' }, { text, flush: true },
  ], { dropAfterAudio: 1 });
  assert.notEqual(r.code, 1000);
  const heard = r.frames.filter((f) => f.audio).reduce((n, f) => n + f.alignment.chars.length, 0);
  assert.ok(heard > 0 && heard < [...text].length, `the client heard ${heard} of ${[...text].length} characters before it left`);
  let now = await balanceNano(gw, account);
  for (let i = 0; i < 60 && before === now; i++) { await new Promise((x) => setTimeout(x, 50)); now = await balanceNano(gw, account); }
  await assertInvariants(assert, gw, account);
  now = await balanceNano(gw, account);
  const billed = (before - now) / PER_CHAR;
  assert.equal((before - now) % PER_CHAR, 0n);
  assert.ok(billed >= BigInt(heard), `billed ${billed} characters, at least the ${heard} heard`);
  assert.ok(billed < BigInt([...text].length), `billed ${billed} characters, less than the ${[...text].length} of the whole text: the generation was stopped`);
});

test('a session whose balance runs out mid-way is told why and closed, billed for what it got', async () => {
  const gw = await gateway();
  // 1,000,000 nanodollars: 66 characters at 15,000 each. A generation's characters are a known cost:
  // one of 40 (600,000 nd) fits, a second does not fit in the 400,000 left, so it is refused, not overdrawn.
  const { key, account } = await gw.account('0.001');
  const chunk = 'Forty characters of text are said here. ';
  const frames = [{ text: ' ' }];
  for (let i = 0; i < 4; i++) frames.push({ text: chunk, flush: true });
  const r = await session(gw, 'output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key }, frames);
  assert.equal(r.code, 1008);
  assert.match(r.reason + JSON.stringify(r.frames), /insufficient_balance/);
  byGeneration(r.frames, [chunk]); // the second chunk costs more than the balance left, and the balance never goes below zero
  const told = r.frames.find((f) => f.error === 'insufficient_balance');
  assert.equal(told?.code, 1008, 'the family\'s message, then the 1008 close');
  assert.match(told.message, /needs up to \$0\.0006 \(600000 nd\); \$0\.0004 \(400000 nd\) is available/);
  assert.match(told.message, /This session was billed \$0\.0006 \(600000 nd\) in all\./, 'what it was billed');
  const show = await gw.cli('account', 'show', account);
  assert.equal(BigInt(Math.round(show.balance * 1e9)), 1_000_000n - BigInt(chunk.length) * PER_CHAR);
  await assertInvariants(assert, gw, account);
});

test('a session whose key ceiling runs out mid-way is told so (key_spend_limit_reached, what it was billed) and closed with 1008; nothing more runs', async () => {
  const gw = await gateway();
  // A daily ceiling of $0.001: 66 characters. The first generation (40) fits; the second is refused before it runs.
  const { key, account } = await gw.account('10', { spendLimit: '0.001', period: 'daily' });
  const chunk = 'Forty characters of text are said here. ';
  const r = await session(gw, 'output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key }, [
    { text: ' ' }, { text: chunk, flush: true }, { text: chunk, flush: true }, { text: chunk, flush: true },
  ]);
  assert.equal(r.code, 1008);
  assert.equal(r.reason, 'key_spend_limit_reached');
  byGeneration(r.frames, [chunk]);
  const told = r.frames.at(-1);
  assert.equal(told.error, 'key_spend_limit_reached');
  assert.equal(told.code, 1008);
  assert.match(told.message, /This session was billed \$0\.0006 \(600000 nd\) in all\./);
  assert.equal(10_000_000_000n - await balanceNano(gw, account), BigInt(chunk.length) * PER_CHAR, 'only the generation that ran is billed');
  await assertInvariants(assert, gw, account);
});

test('audio is relayed as the upstream makes it: a generation\'s first frame arrives long before its last', async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const text = 'Each quarter second of this speech leaves the gateway as soon as it is made. ';
  const s = await connect(wsUrl(gw, 'output_format=pcm_16000&model_id=sim-tts'), { 'xi-api-key': key, 'x-sim-token-delay-ms': '100' });
  const at = [];
  s.ws.on('message', (d) => { if (JSON.parse(d.toString()).audio) at.push(Date.now()); });
  s.ws.send(JSON.stringify({ text: ' ' }));
  s.ws.send(JSON.stringify({ text, flush: true }));
  s.ws.send(JSON.stringify({ text: '' }));
  assert.equal((await s.closed).code, 1000);
  // sim: 60 ms a character in 250 ms pieces, 100 ms apart: 19 pieces over about 1.9 s.
  const [frames] = byGeneration(s.frames, [text]);
  assert.ok(frames.length >= 5, `${frames.length} frames`);
  assert.ok(at.at(-1) - at[0] >= 1000, `the first frame came ${at.at(-1) - at[0]} ms before the last`);
  await assertInvariants(assert, gw, account);
});

test('each generation counts as a request against the key\'s rpm: past it the session is told and closed', async () => {
  const gw = await gateway();
  // rpm 2: the connection takes one token, the first generation the other.
  const { key, account } = await gw.account('1', { rpm: 2 });
  const r = await session(gw, 'output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key }, [
    { text: ' ' }, { text: 'One generation fits. ', flush: true }, { text: 'The second does not. ', flush: true },
  ]);
  assert.equal(r.code, 1008);
  assert.match(r.reason + JSON.stringify(r.frames), /rate_limit_exceeded/);
  byGeneration(r.frames, ['One generation fits. ']);
  const show = await gw.cli('account', 'show', account);
  assert.equal(BigInt(Math.round(show.balance * 1e9)), 1_000_000_000n - BigInt('One generation fits. '.length) * PER_CHAR, 'only the generation made is billed');
  await assertInvariants(assert, gw, account);
});

test('a cloned voice speaks only for its own account: another account\'s key is refused with 404 at the upgrade', async () => {
  const gw = await gateway();
  const a = await gw.account('1');
  const b = await gw.account('1');
  const wav = Buffer.alloc(44 + 32_000);
  wav.write('RIFF', 0); wav.writeUInt32LE(36 + 32_000, 4); wav.write('WAVEfmt ', 8); wav.writeUInt32LE(16, 16); wav.writeUInt16LE(1, 20);
  wav.writeUInt16LE(1, 22); wav.writeUInt32LE(16_000, 24); wav.writeUInt32LE(32_000, 28); wav.writeUInt16LE(2, 32); wav.writeUInt16LE(16, 34);
  wav.write('data', 36); wav.writeUInt32LE(32_000, 40);
  for (let i = 0; i < 16_000; i++) wav.writeInt16LE(Math.round(Math.sin(i / 5) * 4000), 44 + i * 2);
  const form = new FormData();
  form.append('name', 'Mine');
  form.append('files', new Blob([wav], { type: 'audio/wav' }), 'a.wav');
  const added = await gw.fetch('/beta/v1/voices/add', { method: 'POST', headers: { 'xi-api-key': a.key }, body: form });
  assert.equal(added.status, 200, await added.clone().text());
  const { voice_id: voiceId } = await added.json();
  const url = wsUrl(gw, 'output_format=pcm_16000').replace(VOICE, voiceId);
  const other = await connect(url, { 'xi-api-key': b.key });
  assert.equal(other.refused?.status, 404);
  assert.equal(other.refused.body.detail.status, 'voice_not_found');
  const mine = await connect(url, { 'xi-api-key': a.key });
  assert.ok(mine.ws, 'its own account opens a session on it');
  mine.ws.send(JSON.stringify({ text: ' ' }));
  mine.ws.send(JSON.stringify({ text: 'Spoken in my own voice. ', flush: true }));
  mine.ws.send(JSON.stringify({ text: '' }));
  assert.equal((await mine.closed).code, 1000);
  byGeneration(mine.frames, ['Spoken in my own voice. ']);
  await assertInvariants(assert, gw, a.account);
});

test('mp3 is made as the REST routes make it: each generation is an mp3 at the format\'s sample rate and bit rate, as long as its speech', async () => {
  const { parseBuffer } = await import('music-metadata');
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const first = 'The first generation is encoded at twenty two kilohertz. ';
  const second = 'So is the second one. ';
  const r = await session(gw, 'output_format=mp3_22050_32&model_id=sim-tts', { 'xi-api-key': key }, [
    { text: ' ' }, { text: first, flush: true }, { text: second, flush: true }, { text: '' },
  ]);
  assert.equal(r.code, 1000);
  const gens = byGeneration(r.frames, [first, second]);
  for (const [i, text] of [first, second].entries()) {
    // a generation's frames, joined, are one mp3
    const mp3 = Buffer.concat(gens[i].map((f) => Buffer.from(f.audio, 'base64')));
    const { format } = await parseBuffer(mp3, { mimeType: 'audio/mpeg' }, { duration: true });
    assert.equal(format.container, 'MPEG');
    assert.equal(format.sampleRate, 22_050, 'the rate output_format names (the upstream speaks 24 kHz)');
    assert.equal(format.bitrate, 32_000);
    // sim speaks 60 ms a character; mp3 pads to whole frames and adds the encoder's delay.
    const want = [...text].length * 0.06;
    assert.ok(format.duration >= want - 0.01 && format.duration <= want + 0.2, `${format.duration} s for ${want} s of speech`);
    const spans = gens[i].map((f) => (f.alignment ? f.alignment.charStartTimesMs.at(-1) + f.alignment.charsDurationsMs.at(-1) : 0));
    const spanned = spans.reduce((n, x) => n + x, 0);
    assert.ok(Math.abs(spanned - want * 1000) <= 2 * spans.length, `the frames' alignments span the speech: ${spanned} ms for ${want * 1000}`);
  }
  await assertInvariants(assert, gw, account);
});

test('opus is made as the REST routes make it: each generation is Ogg Opus audio', async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const text = 'Opus at forty eight kilohertz. ';
  const r = await session(gw, 'output_format=opus_48000_64&model_id=sim-tts', { 'xi-api-key': key }, [
    { text: ' ' }, { text, flush: true }, { text: '' },
  ]);
  assert.equal(r.code, 1000, JSON.stringify(r.frames[0]));
  const [frames] = byGeneration(r.frames, [text]);
  const ogg = Buffer.concat(frames.map((f) => Buffer.from(f.audio, 'base64')));
  assert.equal(ogg.subarray(0, 4).toString('latin1'), 'OggS');
  assert.ok(ogg.includes(Buffer.from('OpusHead')), 'an Ogg Opus stream');
  const { parseBuffer } = await import('music-metadata');
  const { format } = await parseBuffer(ogg, { mimeType: 'audio/ogg' }, { duration: true });
  assert.ok(Math.abs(format.duration - [...text].length * 0.06) <= 0.05, `${format.duration} s`);
  await assertInvariants(assert, gw, account);
});

test('an upstream that fails before any audio closes with 1011 and bills nothing; one that breaks off after audio sends what it made, bills the characters it sent and closes with 1011', async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  // sim takes its test controls from the upgrade's x-sim-* headers (its upstream forwards them, as on the REST routes).
  const failed = await session(gw, 'output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key, 'x-sim-fail-status': '500' }, [
    { text: ' ' }, { text: 'This text is never spoken. ', flush: true },
  ]);
  assert.equal(failed.code, 1011);
  assert.match(failed.reason, /nothing was billed/);
  assert.equal(failed.frames.filter((f) => f.audio).length, 0);
  assert.equal(await balanceNano(gw, account), before, 'a generation that produced nothing bills nothing');
  const text = 'This generation is cut off by its upstream after half a second of speech. ';
  const cut = await session(gw, 'output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key, 'x-sim-truncate-after': '2' }, [
    { text: ' ' }, { text, flush: true },
  ]);
  assert.equal(cut.code, 1011);
  const audio = cut.frames.filter((f) => f.audio);
  assert.ok(audio.length >= 1, 'what the upstream made before it broke off');
  const bytes = audio.reduce((n, f) => n + Buffer.from(f.audio, 'base64').length, 0);
  assert.ok(bytes > 0 && bytes <= 0.5 * 16_000 * 2, `${bytes} bytes: at most sim's two 250 ms pieces, at 16 kHz`);
  const said = audio.map((f) => f.alignment?.chars.join('') ?? '').join('');
  assert.ok(said.length > 0 && text.startsWith(said) && said.length < text.length, `the frames cover the start of the text: ${JSON.stringify(said)}`);
  assert.match(cut.reason + JSON.stringify(cut.frames), new RegExp(`the ${said.length} characters of the audio it sent were billed`));
  assert.equal(before - (await balanceNano(gw, account)), BigInt(said.length) * PER_CHAR, 'billed the characters sent, not the whole text');
  await assertInvariants(assert, gw, account);
});

/** 98 characters of text, without a trailing space (issue 24: billed 99 with the flush frame's space). */
const NINETY_EIGHT = 'The flush frame carries one space that is not text to speak, so it is never billed as a character.';

test('a whitespace-only frame (the flush frame {"text":" ","flush":true}) adds no characters: billed the text to speak, words still kept apart', async () => {
  assert.equal([...NINETY_EIGHT].length, 98);
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const r = await session(gw, 'output_format=pcm_16000&model_id=sim-tts', { 'xi-api-key': key }, [
    { text: ' ' }, { text: NINETY_EIGHT }, { text: ' ', flush: true },
    // a lone space between two words keeps them apart (it is spoken as the space between them)
    { text: 'Hello' }, { text: ' ' }, { text: 'world.', flush: true }, { text: '' },
  ]);
  assert.equal(r.code, 1000);
  byGeneration(r.frames, [NINETY_EIGHT, 'Hello world.']);
  assert.equal(before - (await balanceNano(gw, account)), (98n + 12n) * PER_CHAR, 'billed 98 + 12 characters, no flush space');
  await assertInvariants(assert, gw, account);
});

test('opus generations on one socket are one Ogg Opus stream: one BOS page, one serial, growing granules; joined, the whole speech decodes', { skip: !hasFfmpeg && 'ffmpeg not installed' }, async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const texts = ['The first generation is spoken here. ', 'A second one follows it. ', 'And a third ends the socket. '];
  const r = await session(gw, 'output_format=opus_48000_64&model_id=sim-tts', { 'xi-api-key': key }, [
    { text: ' ' }, ...texts.map((text) => ({ text, flush: true })), { text: '' },
  ]);
  assert.equal(r.code, 1000);
  byGeneration(r.frames, texts);
  const ogg = Buffer.concat(r.frames.filter((f) => f.audio).map((f) => Buffer.from(f.audio, 'base64')));
  const pages = oggPages(ogg);
  assert.equal(pages.filter((p) => p.flags & 2).length, 1, 'one beginning-of-stream page');
  assert.deepEqual([...new Set(pages.map((p) => p.serial))].length, 1, 'one serial number');
  assert.deepEqual(pages.map((p) => p.seq), pages.map((_, i) => i), 'page sequence numbers run on');
  for (let i = 1; i < pages.length; i++) assert.ok(pages[i].granule >= pages[i - 1].granule, `granule ${pages[i].granule} after ${pages[i - 1].granule}`);
  // sim speaks 60 ms a character; each generation ends on a whole 20 ms packet (under 27 ms of silence after it);
  // ffprobe's duration of Ogg Opus counts the 6.5 ms pre-skip too
  const sum = texts.reduce((n, t) => n + [...t].length * 0.06, 0);
  const p = probeAudio(ogg, 'ogg');
  for (const d of [p.duration, p.decodedSeconds]) assert.ok(d >= sum - 0.001 && d <= sum + 0.027 * texts.length + 0.0066, `${d} s for ${sum} s of speech`);
  await assertInvariants(assert, gw, account);
});

test('a first frame carrying a key other than the upgrade\'s is two credentials: closed with 1008 invalid_api_key, nothing spoken or billed; the same key again is one', async () => {
  const gw = await gateway();
  const { key, account } = await gw.account('1');
  const { key: other, account: otherAccount } = await gw.account('1');
  const before = [await balanceNano(gw, account), await balanceNano(gw, otherAccount)];
  const s = await connect(wsUrl(gw, 'output_format=pcm_16000&model_id=sim-tts'), { 'xi-api-key': key });
  assert.ok(s.ws, JSON.stringify(s.refused));
  s.ws.send(JSON.stringify({ text: ' ', xi_api_key: other }));
  s.ws.send(JSON.stringify({ text: 'This must not be spoken on either account. ', flush: true }));
  const { code, reason } = await s.closed;
  assert.equal(code, 1008);
  assert.match(reason + JSON.stringify(s.frames), /invalid_api_key/);
  assert.equal(s.frames.filter((f) => typeof f.audio === 'string').length, 0);
  const same = await connect(wsUrl(gw, 'output_format=pcm_16000&model_id=sim-tts'), { 'xi-api-key': key });
  same.ws.send(JSON.stringify({ text: ' ', xi_api_key: key }));
  same.ws.send(JSON.stringify({ text: '' }));
  assert.equal((await same.closed).code, 1000);
  assert.deepEqual([await balanceNano(gw, account), await balanceNano(gw, otherAccount)], before);
  await assertInvariants(assert, gw, account);
});

// The beta family's voices: cloning from samples, reading, listing, deleting; tenant isolation; its error envelope; models and subscription.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, TEST_MODELS, assertInvariants, dollarsToNano } from './helpers/gateway.mjs';
import { wav as wavOf } from './helpers/wav.mjs';

/** A voice sample: `samples` long (16 kHz), a different tone for each seed. */
const wav = (seed, samples = 1600) => wavOf(samples / 16_000, { amp: 8000, step: (seed + 1) / 10 });

const MODELS = TEST_MODELS;

function voiceForm({ name = 'Narrator', files = [wav(1), wav(2)], labels, description } = {}) {
  const f = new FormData();
  if (name !== null) f.append('name', name);
  files.forEach((b, i) => f.append('files', new Blob([b], { type: 'audio/wav' }), `sample-${i}.wav`));
  if (labels !== undefined) f.append('labels', labels);
  if (description !== undefined) f.append('description', description);
  return f;
}

function xi(key, extra = {}) { return { 'xi-api-key': key, ...extra }; }

async function addVoice(gw, key, opts) {
  const res = await gw.fetch('/beta/v1/voices/add', { method: 'POST', headers: xi(key), body: voiceForm(opts) });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body;
}

function assertEnvelope(body, status, code) {
  assert.equal(body.detail.status, code, JSON.stringify(body));
  assert.equal(typeof body.detail.message, 'string');
  assert.equal(body.error.code, code);
  assert.equal(body.error.message, body.detail.message);
  assert.ok('type' in body.error && 'param' in body.error);
}

for (const store of ['postgres', 'pglite']) {
  test(`a cloned voice is stored with its samples, listed, read, its sample audio served, then deleted (${store})`, async (t) => {
    const gw = await startGateway(t, { store, models: MODELS });
    const { key, account } = await gw.account('5');
    const samples = [wav(3), wav(4, 2400)];
    const added = await addVoice(gw, key, { name: 'Narrator', files: samples, labels: '{"accent":"british","use_case":"narration"}', description: 'calm' });
    assert.deepEqual(Object.keys(added).sort(), ['requires_verification', 'voice_id']);
    assert.match(added.voice_id, /^[0-9A-Za-z]{20}$/);

    const v = await (await gw.fetch(`/beta/v1/voices/${added.voice_id}`, { headers: xi(key) })).json();
    assert.equal(v.voice_id, added.voice_id);
    assert.equal(v.name, 'Narrator');
    assert.equal(v.category, 'cloned');
    assert.equal(v.description, 'calm');
    assert.deepEqual(v.labels, { accent: 'british', use_case: 'narration' });
    assert.deepEqual(v.high_quality_base_model_ids, ['sim-tts-clone']);
    assert.equal(v.samples.length, 2);
    assert.deepEqual(v.samples.map((s) => s.file_name), ['sample-0.wav', 'sample-1.wav']);
    assert.deepEqual(v.samples.map((s) => s.size_bytes), samples.map((b) => b.length));
    assert.deepEqual(v.samples.map((s) => s.duration_secs), [0.1, 0.15], 'durations read from the files (1,600 and 2,400 samples at 16 kHz)');

    for (const [i, s] of v.samples.entries()) {
      const res = await gw.fetch(`/beta/v1/voices/${v.voice_id}/samples/${s.sample_id}/audio`, { headers: xi(key) });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('content-type'), 'audio/wav');
      assert.ok(Buffer.from(await res.arrayBuffer()).equals(samples[i]), 'the sample comes back byte for byte');
    }
    const v1 = await (await gw.fetch('/beta/v1/voices', { headers: xi(key) })).json();
    assert.ok(v1.voices.some((x) => x.voice_id === v.voice_id));
    const v2 = await (await gw.fetch('/beta/v2/voices', { headers: xi(key) })).json();
    assert.equal(v2.voices[0].voice_id, v.voice_id, 'newest first: the cloned voice leads the first page');
    assert.ok(v2.voices.some((x) => x.category === 'premade'), 'premade voices are listed for everyone');
    const all = await (await gw.fetch('/beta/v2/voices?page_size=100', { headers: xi(key) })).json();
    assert.equal(all.has_more, false);
    assert.equal(all.total_count, all.voices.length);
    assert.ok(all.voices.some((x) => x.voice_id === 'JBFqnCBsd6RMkjVDRZzb' && x.name === 'George'));

    const del = await gw.fetch(`/beta/v1/voices/${v.voice_id}/samples/${v.samples[0].sample_id}`, { method: 'DELETE', headers: xi(key) });
    assert.deepEqual(await del.json(), { status: 'ok' });
    const after = await (await gw.fetch(`/beta/v1/voices/${v.voice_id}`, { headers: xi(key) })).json();
    assert.deepEqual(after.samples.map((s) => s.sample_id), [v.samples[1].sample_id]);
    const gone = await gw.fetch(`/beta/v1/voices/${v.voice_id}/samples/${v.samples[0].sample_id}/audio`, { headers: xi(key) });
    assert.equal(gone.status, 404);
    assertEnvelope(await gone.json(), 404, 'sample_not_found');

    assert.deepEqual(await (await gw.fetch(`/beta/v1/voices/${v.voice_id}`, { method: 'DELETE', headers: xi(key) })).json(), { status: 'ok' });
    const missing = await gw.fetch(`/beta/v1/voices/${v.voice_id}`, { headers: xi(key) });
    assert.equal(missing.status, 404);
    assertEnvelope(await missing.json(), 404, 'voice_not_found');
    const list = await (await gw.fetch('/beta/v2/voices', { headers: xi(key) })).json();
    assert.ok(!list.voices.some((x) => x.voice_id === v.voice_id));
    const again = await gw.fetch(`/beta/v1/voices/${v.voice_id}/samples/${v.samples[1].sample_id}/audio`, { headers: xi(key) });
    assert.equal(again.status, 404, 'a deleted voice keeps no sample audio');
    await assertInvariants(assert, gw, account);
  });
}

test("account B's key gets 404 on account A's voice and sample, for every verb, and A's voice is untouched", async (t) => {
  const gw = await startGateway(t, { store: 'postgres', models: MODELS });
  const a = await gw.account('5');
  const b = await gw.account('5');
  const { voice_id: id } = await addVoice(gw, a.key);
  const voice = await (await gw.fetch(`/beta/v1/voices/${id}`, { headers: xi(a.key) })).json();
  const sample = voice.samples[0].sample_id;
  const attempts = [
    ['GET', `/beta/v1/voices/${id}`, 'voice_not_found'],
    ['DELETE', `/beta/v1/voices/${id}`, 'voice_not_found'],
    ['DELETE', `/beta/v1/voices/${id}/samples/${sample}`, 'voice_not_found'],
    ['GET', `/beta/v1/voices/${id}/samples/${sample}/audio`, 'voice_not_found'],
  ];
  for (const [method, path, code] of attempts) {
    const res = await gw.fetch(path, { method, headers: xi(b.key) });
    assert.equal(res.status, 404, `${method} ${path}`);
    const body = await res.json();
    assertEnvelope(body, 404, code);
    assert.ok(!JSON.stringify(body).includes(voice.name) || voice.name === 'Narrator', 'nothing of the voice leaks');
  }
  for (const path of ['/beta/v1/voices', '/beta/v2/voices']) {
    const list = await (await gw.fetch(path, { headers: xi(b.key) })).json();
    assert.ok(!list.voices.some((x) => x.voice_id === id), `${path} lists no other tenant's voice`);
  }
  // B's own sample id under A's voice, and A's sample under B's voice: still 404.
  const { voice_id: bid } = await addVoice(gw, b.key, { name: 'Other' });
  const res = await gw.fetch(`/beta/v1/voices/${bid}/samples/${sample}/audio`, { headers: xi(b.key) });
  assert.equal(res.status, 404);
  assertEnvelope(await res.json(), 404, 'sample_not_found');
  const still = await (await gw.fetch(`/beta/v1/voices/${id}`, { headers: xi(a.key) })).json();
  assert.equal(still.samples.length, voice.samples.length, "A's voice and samples are untouched");
});

test('bad voice uploads are refused in the family envelope and leave nothing stored', async (t) => {
  const gw = await startGateway(t, { store: 'postgres', models: MODELS });
  const { key } = await gw.account('5');
  const post = (body, headers = {}) => gw.fetch('/beta/v1/voices/add', { method: 'POST', headers: xi(key, headers), body });

  let res = await post(voiceForm({ labels: '{"accent": british}' }));
  assert.equal(res.status, 422);
  let body = await res.json();
  assert.equal(body.error.code, 'invalid_labels');
  assert.deepEqual(body.detail[0].loc, ['body', 'labels']);
  assert.equal(typeof body.detail[0].msg, 'string');

  res = await post(voiceForm({ labels: '["a"]' }));
  assert.equal(res.status, 422);
  assert.equal((await res.json()).error.code, 'invalid_labels');

  res = await post(voiceForm({ name: null }));
  assert.equal(res.status, 422);
  body = await res.json();
  assert.deepEqual(body.detail[0].loc, ['body', 'name']);

  res = await post(voiceForm({ files: [] }));
  assert.equal(res.status, 422);
  assert.deepEqual((await res.json()).detail[0].loc, ['body', 'files']);

  res = await post(voiceForm({ files: [Buffer.from('definitely not audio')] }));
  assert.equal(res.status, 400);
  assertEnvelope(await res.json(), 400, 'invalid_audio');

  res = await post('{"name":"x"}', { 'content-type': 'application/json' });
  assert.equal(res.status, 415);
  assertEnvelope(await res.json(), 415, 'unsupported_media_type');

  res = await post(Buffer.from('--xx\r\nContent-Disposition: form-data; name="name"\r\n\r\nA'), { 'content-type': 'multipart/form-data; boundary=xx' });
  assert.equal(res.status, 400);
  assertEnvelope(await res.json(), 400, 'invalid_multipart');

  // The upstream refuses to clone: 502, and no voice appears.
  res = await post(voiceForm(), { 'x-sim-fail-status': '500' });
  assert.equal(res.status, 502);
  assertEnvelope(await res.json(), 502, 'upstream_error');

  const list = await (await gw.fetch('/beta/v2/voices?page_size=100', { headers: xi(key) })).json();
  assert.deepEqual(list.voices.filter((v) => v.category !== 'premade'), [], 'no refused upload left a voice');
});

test('voice routes need the voice scope and a key, answered in the beta envelope', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', models: MODELS });
  const { key } = await gw.account('5', { scopes: 'llm' });
  for (const path of ['/beta/v1/voices', '/beta/v2/voices', '/beta/v1/models', '/beta/v1/user/subscription']) {
    const res = await gw.fetch(path, { headers: xi(key) });
    assert.equal(res.status, 403, path);
    assertEnvelope(await res.json(), 403, 'insufficient_scope');
  }
  const res = await gw.fetch('/beta/v1/voices', { headers: xi('svc_live_notakeynotakeynotakeynotakey000000') });
  assert.equal(res.status, 401);
  assertEnvelope(await res.json(), 401, 'invalid_api_key');
  const none = await gw.fetch('/beta/v1/nothing-here', { headers: xi(key) });
  assert.equal(none.status, 404);
  assertEnvelope(await none.json(), 404, 'not_found');
});

test('models list the speech models as a bare array; the subscription maps balance and voices honestly', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', models: MODELS });
  const { key } = await gw.account('3');
  const models = await (await gw.fetch('/beta/v1/models', { headers: xi(key) })).json();
  assert.ok(Array.isArray(models));
  assert.deepEqual(models.map((m) => m.model_id).sort(), ['sim-sts', 'sim-tts', 'sim-tts-clone']);
  assert.equal(models.find((m) => m.model_id === 'sim-sts').can_do_voice_conversion, true);
  assert.equal(models[0].can_do_text_to_speech, true);
  let sub = await (await gw.fetch('/beta/v1/user/subscription', { headers: xi(key) })).json();
  // $3 at $30 per 1M characters buys 100,000 characters.
  assert.equal(sub.character_count, 0);
  assert.equal(sub.character_limit, 100_000);
  assert.equal(sub.status, 'active');
  assert.equal(sub.voice_slots_used, 0);
  assert.equal(sub.voice_limit, 30, 'voices.max_per_account by default');
  assert.equal(sub.can_use_instant_voice_cloning, true);
  await addVoice(gw, key);
  const { voice_id } = await addVoice(gw, key, { name: 'Second' });
  await gw.fetch(`/beta/v1/voices/${voice_id}`, { method: 'DELETE', headers: xi(key) });
  sub = await (await gw.fetch('/beta/v1/user/subscription', { headers: xi(key) })).json();
  assert.equal(sub.voice_slots_used, 1);
  assert.equal(sub.voice_add_edit_counter, 2, 'the month counts every voice added, a deleted one too');
});

test('configured voice and upload limits are enforced: voices per account, samples per voice, bytes per sample and per speech upload', async (t) => {
  const gw = await startGateway(t, {
    store: 'pglite', models: MODELS,
    voices: { max_per_account: 1, max_samples: 2 },
    limits: { route_upload_bytes: { 'beta.voices.add': 4096, 'beta.stt': 4096, 'beta.sts': 4096 } },
  });
  const { key, account } = await gw.account('5');
  const balance = async () => dollarsToNano(String((await (await gw.fetch('/svc/v1/key', { headers: xi(key) })).json()).balance));
  const before = await balance();
  const small = wav(1); // 3,244 bytes
  const big = wav(2, 3000); // 6,044 bytes
  assert.ok(small.length < 4096 && big.length > 4096);

  let res = await gw.fetch('/beta/v1/voices/add', { method: 'POST', headers: xi(key), body: voiceForm({ files: [small, big] }) });
  assert.equal(res.status, 413);
  let body = await res.json();
  assertEnvelope(body, 413, 'request_too_large');
  assert.match(body.error.message, /4096 bytes/);

  res = await gw.fetch('/beta/v1/voices/add', { method: 'POST', headers: xi(key), body: voiceForm({ files: [small, wav(3), wav(4)] }) });
  assert.equal(res.status, 422);
  body = await res.json();
  assert.deepEqual(body.detail[0].loc, ['body', 'files']);
  assert.match(body.error.message, /at most 2 samples/);

  let sub = await (await gw.fetch('/beta/v1/user/subscription', { headers: xi(key) })).json();
  assert.equal(sub.voice_limit, 1);
  await addVoice(gw, key, { files: [small, wav(3)] });
  res = await gw.fetch('/beta/v1/voices/add', { method: 'POST', headers: xi(key), body: voiceForm({ name: 'Second', files: [small] }) });
  assert.equal(res.status, 400);
  assertEnvelope(await res.json(), 400, 'voice_limit_reached');
  sub = await (await gw.fetch('/beta/v1/user/subscription', { headers: xi(key) })).json();
  assert.equal(sub.voice_slots_used, 1);

  for (const [path, field] of [['/beta/v1/speech-to-text', 'file'], ['/beta/v1/speech-to-speech/JBFqnCBsd6RMkjVDRZzb', 'audio']]) {
    const f = new FormData();
    f.append('model_id', path.includes('text') ? 'scribe_v1' : 'eleven_english_sts_v2');
    f.append(field, new Blob([big], { type: 'audio/wav' }), 'big.wav');
    res = await gw.fetch(path, { method: 'POST', headers: xi(key), body: f });
    assert.equal(res.status, 413, path);
    assertEnvelope(await res.json(), 413, 'request_too_large');
  }
  // The speech-to-speech stream route has its own name and keeps the default.
  const f = new FormData();
  f.append('model_id', 'eleven_english_sts_v2');
  f.append('audio', new Blob([big], { type: 'audio/wav' }), 'big.wav');
  res = await gw.fetch('/beta/v1/speech-to-speech/JBFqnCBsd6RMkjVDRZzb/stream?output_format=pcm_16000', { method: 'POST', headers: xi(key), body: f });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const list = await (await gw.fetch('/beta/v2/voices?page_size=100', { headers: xi(key) })).json();
  assert.equal(list.voices.filter((v) => v.category !== 'premade').length, 1, 'only the voice within the limits was kept');
  // The stream conversion was billed (its 187.5 ms, rounded up, at $0.18 a minute); nothing else was.
  const stsNano = (188n * 180_000_000n + 59_999n) / 60_000n;
  let after = await balance();
  for (let i = 0; i < 100 && after === before; i++) { await new Promise((r) => setTimeout(r, 30)); after = await balance(); }
  assert.equal(before - after, stsNano);
  await assertInvariants(assert, gw, account);
});

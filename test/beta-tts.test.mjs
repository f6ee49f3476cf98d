// The beta family's text to speech: refusals before any upstream (validation, output_format, voices, limits) bill nothing;
// the speech parameters a model's upstream honours are sent on, the others refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import WebSocket from 'ws';
import { startGateway, assertInvariants, dollarsToNano } from './helpers/gateway.mjs';

function xi(key, extra = {}) { return { 'xi-api-key': key, 'content-type': 'application/json', ...extra }; }

test('text to speech refuses bad requests in the family envelope, before any upstream, billing nothing', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('5');
  const before = (await (await gw.fetch('/svc/v1/key', { headers: xi(key) })).json()).balance;
  const post = (path, body, extra) => gw.fetch(path, { method: 'POST', headers: xi(key, extra), body: typeof body === 'string' ? body : JSON.stringify(body) });

  let res = await post('/beta/v1/text-to-speech/nosuchvoice?output_format=pcm_24000', { text: 'Hello.' });
  assert.equal(res.status, 404);
  let body = await res.json();
  assert.equal(body.detail.status, 'voice_not_found');
  assert.equal(body.error.code, 'voice_not_found');

  for (const path of ['/beta/v1/text-to-speech/v', '/beta/v1/text-to-speech/v/stream', '/beta/v1/text-to-speech/v/with-timestamps', '/beta/v1/text-to-speech/v/stream/with-timestamps']) {
    res = await post(`${path}?output_format=wav_11025`, { text: 'Hello.' });
    assert.equal(res.status, 422, path);
    body = await res.json();
    assert.deepEqual(body.detail[0].loc, ['query', 'output_format']);
    assert.equal(body.error.code, 'validation_error');
  }
  res = await post('/beta/v1/text-to-speech/v', { model_id: 'eleven_multilingual_v2' });
  assert.equal(res.status, 422);
  assert.deepEqual((await res.json()).detail[0].loc, ['body', 'text']);
  res = await post('/beta/v1/text-to-speech/v', { text: 'Hi', apply_text_normalization: 'sometimes' });
  assert.equal(res.status, 422);
  assert.deepEqual((await res.json()).detail[0].loc, ['body', 'apply_text_normalization']);
  res = await post('/beta/v1/text-to-speech/v', { text: 'x'.repeat(10_001) });
  assert.equal(res.status, 400);
  assert.equal((await res.json()).detail.status, 'max_character_limit_exceeded');
  res = await post('/beta/v1/text-to-speech/v', { text: 'Hi', pronunciation_dictionary_locators: [{ pronunciation_dictionary_id: 'd' }] });
  assert.equal(res.status, 422);
  assert.equal((await res.json()).error.code, 'unsupported_parameter');
  res = await post('/beta/v1/text-to-speech/v', 'text=hi', { 'content-type': 'text/plain' });
  assert.equal(res.status, 415);

  const after = (await (await gw.fetch('/svc/v1/key', { headers: xi(key) })).json()).balance;
  assert.equal(after, before, 'nothing was billed');
  await assertInvariants(assert, gw, account);
});

const RACHEL = '21m00Tcm4TlvDq8ikWAM'; // a premade voice (docs/elevenlabs.md, premade voices)

/** An OpenAI-compatible speech host that records each request's JSON and answers 0.1 s of 24 kHz PCM. */
async function recordingHost(t) {
  const seen = [];
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      seen.push({ path: req.url, body: JSON.parse(Buffer.concat(parts).toString('utf8')) });
      res.writeHead(200, { 'content-type': 'audio/pcm' });
      res.end(Buffer.alloc(4800));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${server.address().port}`, seen };
}

async function balanceNano(gw, key) {
  return dollarsToNano(String((await (await gw.fetch('/svc/v1/key', { headers: xi(key) })).json()).balance));
}

test('speech parameters the model\'s upstream honours are sent on; one it does not is refused 422 naming the models that take it; no-ops pass', async (t) => {
  const host = await recordingHost(t);
  const gw = await startGateway(t, {
    store: 'pglite',
    upstreams: { host: { base_url: host.url }, sim: { sim: {} } },
    models: [
      { id: 'host-tts', upstream: 'host', upstream_model: 'org/voice-1', kind: 'tts', per_mchar: '15', speech_params: ['seed', 'language_code', 'apply_text_normalization'] },
      { id: 'host-tts-plain', upstream: 'host', kind: 'tts', per_mchar: '15' },
      // sim does not normalize text: told to, it refuses (400), which shows the parameter reached it.
      { id: 'sim-norm', upstream: 'sim', kind: 'tts', simulated: true, per_mchar: '15', speech_params: ['apply_text_normalization'] },
    ],
  });
  const { key, account } = await gw.account('5');
  const post = (path, body) => gw.fetch(path, { method: 'POST', headers: xi(key), body: JSON.stringify(body) });
  const text = 'Guten Tag.';
  const chars = BigInt([...text].length);

  // Honoured: sent on as JSON fields of the same name; the no-ops (use_pvc_as_ivc, enable_logging, optimize_streaming_latency) are not.
  for (const suffix of ['', '/stream', '/with-timestamps', '/stream/with-timestamps']) {
    const before = await balanceNano(gw, key);
    const res = await post(`/beta/v1/text-to-speech/${RACHEL}${suffix}?output_format=pcm_24000&enable_logging=false&optimize_streaming_latency=3`,
      { text, model_id: 'host-tts', seed: 42, language_code: 'de', apply_text_normalization: 'off', use_pvc_as_ivc: true });
    assert.equal(res.status, 200, `${suffix}: ${await res.clone().text()}`);
    await res.arrayBuffer();
    const sent = host.seen.at(-1).body;
    assert.equal(host.seen.at(-1).path, '/v1/audio/speech');
    assert.equal(sent.model, 'org/voice-1');
    assert.equal(sent.seed, 42);
    assert.equal(sent.language_code, 'de');
    assert.equal(sent.apply_text_normalization, 'off');
    for (const f of ['use_pvc_as_ivc', 'enable_logging', 'optimize_streaming_latency', 'previous_text']) assert.equal(f in sent, false, `${f} is not sent`);
    let after = before;
    for (let i = 0; i < 100 && after === before; i++) { await new Promise((r) => setTimeout(r, 30)); after = await balanceNano(gw, key); }
    assert.equal(before - after, chars * 15_000n, 'billed exactly characters × price');
  }

  const calls = host.seen.length;
  const before = await balanceNano(gw, key);
  // Not honoured by the model's upstream: refused, naming the field and the models that take it (here: none).
  let res = await post(`/beta/v1/text-to-speech/${RACHEL}`, { text, model_id: 'host-tts', previous_text: 'Vorher.' });
  assert.equal(res.status, 422);
  let body = await res.json();
  assert.deepEqual(body.detail[0].loc, ['body', 'previous_text']);
  assert.equal(body.error.code, 'unsupported_parameter');
  assert.equal(body.error.param, 'previous_text');
  assert.match(body.error.message, /not supported by model host-tts.*no model of this gateway takes it/);
  res = await post(`/beta/v1/text-to-speech/${RACHEL}/stream`, { text, model_id: 'host-tts-plain', seed: 7 });
  assert.equal(res.status, 422);
  body = await res.json();
  assert.deepEqual(body.detail[0].loc, ['body', 'seed']);
  assert.match(body.error.message, /models that take it: host-tts\./);
  for (const [field, value] of [['language_code', 'de'], ['apply_text_normalization', 'on'], ['apply_language_text_normalization', true], ['next_request_ids', ['r1']]]) {
    res = await post(`/beta/v1/text-to-speech/${RACHEL}/with-timestamps`, { text, model_id: 'host-tts-plain', [field]: value });
    assert.equal(res.status, 422, field);
    assert.equal((await res.json()).error.param, field);
  }
  res = await post(`/beta/v1/text-to-speech/${RACHEL}?enable_logging=perhaps`, { text, model_id: 'host-tts' });
  assert.equal(res.status, 422);
  assert.deepEqual((await res.json()).detail[0].loc, ['query', 'enable_logging']);
  res = await post(`/beta/v1/text-to-speech/${RACHEL}?optimize_streaming_latency=9`, { text, model_id: 'host-tts' });
  assert.equal(res.status, 422);
  assert.deepEqual((await res.json()).detail[0].loc, ['query', 'optimize_streaming_latency']);
  assert.equal(host.seen.length, calls, 'no refused request reached the upstream');

  // sim-norm sends apply_text_normalization on; sim refuses it, so the client hears the upstream's reason, billed nothing.
  res = await post(`/beta/v1/text-to-speech/${RACHEL}?output_format=pcm_24000`, { text, model_id: 'sim-norm', apply_text_normalization: 'on' });
  assert.equal(res.status, 400);
  body = await res.json();
  assert.equal(body.error.code, 'upstream_invalid_request');
  assert.match(body.error.message, /sim does not normalize text/);
  assert.equal(await balanceNano(gw, key), before, 'nothing billed for refusals');

  // The family's defaults ask for nothing, so a model without the parameters takes them (and nothing is sent).
  res = await post(`/beta/v1/text-to-speech/${RACHEL}?output_format=pcm_24000`, { text, model_id: 'host-tts-plain', seed: null, language_code: null,
    previous_text: '', apply_text_normalization: 'auto', apply_language_text_normalization: false, previous_request_ids: [] });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const sent = host.seen.at(-1).body;
  for (const f of ['seed', 'language_code', 'previous_text', 'apply_text_normalization', 'apply_language_text_normalization', 'previous_request_ids']) assert.equal(f in sent, false, `${f} is not sent`);
  await assertInvariants(assert, gw, account);
});

test('sim takes seed, language_code, previous_text and next_text: the same seed speaks the same audio; what it cannot honour is refused', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('5');
  const post = (path, body) => gw.fetch(path, { method: 'POST', headers: xi(key), body: JSON.stringify(body) });
  const text = 'The river runs.';
  const body = { text, model_id: 'eleven_flash_v2_5', seed: 12345, language_code: 'en', previous_text: 'It rained.', next_text: 'The sea waits.' };
  const before = await balanceNano(gw, key);
  const audio = [];
  for (let i = 0; i < 2; i++) {
    const res = await post(`/beta/v1/text-to-speech/${RACHEL}?output_format=pcm_16000`, body);
    assert.equal(res.status, 200, await res.clone().text());
    audio.push(Buffer.from(await res.arrayBuffer()));
  }
  assert.ok(audio[0].length > 0 && audio[0].equals(audio[1]), 'the same seed and text speak the same audio');
  let after = before;
  for (let i = 0; i < 100 && before - after < 2n * BigInt([...text].length) * 15_000n; i++) { await new Promise((r) => setTimeout(r, 30)); after = await balanceNano(gw, key); }
  assert.equal(before - after, 2n * BigInt([...text].length) * 15_000n);
  const res = await post(`/beta/v1/text-to-speech/${RACHEL}`, { text, previous_request_ids: ['abc'] });
  assert.equal(res.status, 422);
  assert.match((await res.json()).error.message, /previous_request_ids is not supported by model sim-tts/);
  await assertInvariants(assert, gw, account);
});

test('the stream-input socket sends seed and language_code on to a model that takes them and refuses them at the upgrade for one that does not', async (t) => {
  const host = await recordingHost(t);
  const gw = await startGateway(t, {
    store: 'pglite',
    upstreams: { host: { base_url: host.url } },
    models: [
      { id: 'host-tts', upstream: 'host', kind: 'tts', per_mchar: '15', speech_params: ['seed', 'language_code'] },
      { id: 'host-tts-plain', upstream: 'host', kind: 'tts', per_mchar: '15' },
    ],
  });
  const { key, account } = await gw.account('5');
  const url = (q) => `${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${RACHEL}/stream-input?output_format=pcm_24000&${q}`;
  const open = (q) => new Promise((resolve, reject) => {
    const ws = new WebSocket(url(q), { headers: { 'xi-api-key': key } });
    const frames = [];
    ws.on('message', (d) => frames.push(JSON.parse(d.toString())));
    ws.on('open', () => resolve({ ws, frames, closed: new Promise((r) => ws.on('close', (code) => r(code))) }));
    ws.on('unexpected-response', (_req, res) => {
      let b = '';
      res.on('data', (c) => { b += c; });
      res.on('end', () => resolve({ refused: { status: res.statusCode, body: JSON.parse(b) } }));
    });
    ws.on('error', (e) => { if (!String(e.message).includes('Unexpected server response')) reject(e); });
  });
  const s = await open('model_id=host-tts&seed=9&language_code=fr');
  assert.ok(s.ws, JSON.stringify(s.refused));
  s.ws.send(JSON.stringify({ text: 'Bonjour. ' }));
  s.ws.send(JSON.stringify({ text: '' }));
  assert.equal(await s.closed, 1000);
  assert.ok(s.frames.some((f) => typeof f.audio === 'string'));
  assert.equal(host.seen.at(-1).body.seed, 9);
  assert.equal(host.seen.at(-1).body.language_code, 'fr');

  const calls = host.seen.length;
  let r = await open('model_id=host-tts-plain&language_code=fr');
  assert.equal(r.refused?.status, 422);
  assert.deepEqual(r.refused.body.detail[0].loc, ['query', 'language_code']);
  assert.match(r.refused.body.error.message, /models that take it: host-tts\./);
  r = await open('model_id=host-tts&seed=-1');
  assert.equal(r.refused?.status, 422);
  assert.equal(r.refused.body.error.param, 'seed');
  assert.equal(host.seen.length, calls);
  await assertInvariants(assert, gw, account);
});

test('the config refuses speech_params on a model that does not speak, and names it does not know', async () => {
  const { loadConfigFile } = await import('../dist/config.js');
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-config-'));
  const load = (model, extra = {}) => {
    const path = join(dir, 'c.json');
    writeFileSync(path, JSON.stringify({ upstreams: { sim: { sim: {} } }, models: [model], payments: { provider: 'sandbox', allow_sandbox: true }, ...extra }));
    return loadConfigFile(path, {});
  };
  try {
    const tts = { id: 't', upstream: 'sim', kind: 'tts', per_mchar: '1' };
    assert.deepEqual(load({ ...tts, speech_params: ['seed', 'next_text'] }).models[0].speechParams, ['seed', 'next_text']);
    assert.deepEqual(load(tts).models[0].speechParams, []);
    assert.throws(() => load({ id: 'c', upstream: 'sim', kind: 'chat', input_per_mtok: '1', output_per_mtok: '1', speech_params: ['seed'] }), /\/models\/0\/speech_params: only a tts or sts model/);
    assert.throws(() => load({ ...tts, speech_params: ['pitch'] }), /\/models\/0\/speech_params/);
    assert.deepEqual(load(tts).voices, { maxPerAccount: 30, maxSamples: 25, maxRequestBytes: 100 * 1024 * 1024 }, 'the voice limits default to the family\'s');
    assert.deepEqual(load(tts, { voices: { max_per_account: 3, max_samples: 5 } }).voices, { maxPerAccount: 3, maxSamples: 5, maxRequestBytes: 100 * 1024 * 1024 });
    assert.throws(() => load(tts, { voices: { max_samples: 0 } }), /\/voices\/max_samples/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

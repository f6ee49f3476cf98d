// The beta family's voice_settings (and the stream-input query's enable_ssml_parsing), on every route that takes them:
// sent on to a model whose upstream lists them in speech_params, else refused when they ask for something; the
// premade defaults and null pass everywhere. A later stream-input frame that would change them is answered, not ignored.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startGateway, assertInvariants, dollarsToNano } from './helpers/gateway.mjs';
import { connect as open } from './helpers/ws.mjs';
import { wav } from './helpers/wav.mjs';

const RACHEL = '21m00Tcm4TlvDq8ikWAM'; // a premade voice (docs/elevenlabs.md, premade voices)
const DEFAULTS = { stability: 0.5, similarity_boost: 0.75, style: 0, use_speaker_boost: true };
function xi(key, extra = {}) { return { 'xi-api-key': key, ...extra }; }
const json = { 'content-type': 'application/json' };

/** A speech host that records each request (JSON, or the raw multipart text) and answers 0.1 s of 24 kHz PCM. */
async function recordingHost(t) {
  const seen = [];
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      const raw = Buffer.concat(parts).toString('latin1');
      seen.push({ path: req.url, body: req.headers['content-type']?.startsWith('application/json') ? JSON.parse(raw) : raw });
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

const CONFIG = (host) => ({
  store: 'pglite',
  upstreams: { host: { base_url: host.url }, sim: { sim: {} } },
  models: [
    { id: 'host-tts', upstream: 'host', kind: 'tts', per_mchar: '15', speech_params: ['voice_settings', 'enable_ssml_parsing'] },
    { id: 'host-tts-plain', upstream: 'host', kind: 'tts', per_mchar: '15' },
    { id: 'host-sts', upstream: 'host', kind: 'sts', audio_in_per_minute: '0.18', speech_params: ['voice_settings'] },
    { id: 'host-sts-plain', upstream: 'host', kind: 'sts', audio_in_per_minute: '0.18' },
    // sim's audio does not change with voice settings: told to, it refuses (400), which shows they reached it.
    { id: 'sim-vs', upstream: 'sim', kind: 'tts', simulated: true, per_mchar: '15', speech_params: ['voice_settings'] },
  ],
});

test('text to speech sends voice_settings on to a model that lists them, refuses a non-default setting for one that does not, and takes the defaults everywhere', async (t) => {
  const host = await recordingHost(t);
  const gw = await startGateway(t, CONFIG(host));
  const { key, account } = await gw.account('5');
  const post = (path, body) => gw.fetch(path, { method: 'POST', headers: xi(key, json), body: JSON.stringify(body) });
  const text = 'Hello there.';
  const settings = { stability: 0.2, similarity_boost: 0.9, style: 0.4, use_speaker_boost: false, speed: 1.1 };

  for (const suffix of ['', '/stream', '/with-timestamps', '/stream/with-timestamps']) {
    const res = await post(`/beta/v1/text-to-speech/${RACHEL}${suffix}?output_format=pcm_24000`, { text, model_id: 'host-tts', voice_settings: settings });
    assert.equal(res.status, 200, `${suffix}: ${await res.clone().text()}`);
    await res.arrayBuffer();
    const sent = host.seen.at(-1).body;
    assert.deepEqual(sent.voice_settings, { stability: 0.2, similarity_boost: 0.9, style: 0.4, use_speaker_boost: false }, 'sent on without speed');
    assert.equal(sent.speed, 1.1, 'speed stays OpenAI\'s speed');
  }

  const calls = host.seen.length;
  const before = await balanceNano(gw, key);
  for (const [setting, value] of [['stability', 0.2], ['similarity_boost', 1], ['style', 0.3], ['use_speaker_boost', false]]) {
    for (const suffix of ['', '/stream', '/with-timestamps', '/stream/with-timestamps']) {
      const res = await post(`/beta/v1/text-to-speech/${RACHEL}${suffix}`, { text, model_id: 'host-tts-plain', voice_settings: { ...DEFAULTS, [setting]: value } });
      assert.equal(res.status, 422, `${setting} ${suffix}`);
      const body = await res.json();
      assert.deepEqual(body.detail[0].loc, ['body', 'voice_settings', setting]);
      assert.equal(body.error.code, 'unsupported_parameter');
      assert.equal(body.error.param, `voice_settings.${setting}`);
      assert.match(body.error.message, new RegExp(`voice_settings\\.${setting} is not supported by model host-tts-plain.*models that take it: host-tts, sim-vs\\.`));
    }
  }
  // A setting the family does not document is refused whatever its value: nothing here knows what it would change.
  let res = await post(`/beta/v1/text-to-speech/${RACHEL}`, { text, model_id: 'host-tts-plain', voice_settings: { ...DEFAULTS, clone_strength: 0.5 } });
  assert.equal(res.status, 422);
  assert.deepEqual((await res.json()).detail[0].loc, ['body', 'voice_settings', 'clone_strength']);
  // A sim model configured to list them hears sim's refusal: sim's audio does not change with them.
  res = await post(`/beta/v1/text-to-speech/${RACHEL}?output_format=pcm_24000`, { text, model_id: 'sim-vs', voice_settings: { style: 0.5 } });
  assert.equal(res.status, 400);
  assert.match((await res.json()).error.message, /sim's voice does not change with voice_settings/);
  assert.equal(host.seen.length, calls, 'no refused request reached the host');
  assert.equal(await balanceNano(gw, key), before, 'nothing billed for refusals');

  // The premade defaults and nulls ask for nothing: every model takes them; only speed is sent.
  for (const vs of [DEFAULTS, { stability: null, similarity_boost: null, style: null, use_speaker_boost: null, speed: 0.9 }, null]) {
    res = await post(`/beta/v1/text-to-speech/${RACHEL}?output_format=pcm_24000`, { text, model_id: 'host-tts-plain', voice_settings: vs });
    assert.equal(res.status, 200, JSON.stringify(vs));
    await res.arrayBuffer();
    assert.equal('voice_settings' in host.seen.at(-1).body, false);
  }
  assert.equal(host.seen.at(-2).body.speed, 0.9);
  res = await post(`/beta/v1/text-to-speech/${RACHEL}?output_format=pcm_24000`, { text, model_id: 'sim-vs', voice_settings: DEFAULTS });
  assert.equal(res.status, 200, 'sim takes the defaults it is sent');
  await res.arrayBuffer();
  await assertInvariants(assert, gw, account);
});

/** Opens a stream-input socket (test/helpers/ws.mjs); resolves once open, or with the HTTP refusal. */
const connect = (gw, key, q, path = 'stream-input') =>
  open(`${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${RACHEL}/${path}?output_format=pcm_24000&${q}`, { 'xi-api-key': key });

test('stream-input: the first frame\'s voice_settings are sent on or refused with 1008; a later change is answered; enable_ssml_parsing as a speech parameter', async (t) => {
  const host = await recordingHost(t);
  const gw = await startGateway(t, CONFIG(host));
  const { key, account } = await gw.account('5');

  let s = await connect(gw, key, 'model_id=host-tts&enable_ssml_parsing=true');
  assert.ok(s.ws, JSON.stringify(s.refused));
  s.send({ text: ' ', voice_settings: { stability: 0.3, speed: 0.8 } });
  s.send({ text: 'First part. ', flush: true });
  s.send({ text: 'Second part. ', voice_settings: { stability: 0.9 }, flush: true });
  s.send({ text: 'Third. ', generation_config: { chunk_length_schedule: [50] }, voice_settings: { stability: 0.3, speed: 0.8 } });
  s.send({ text: '' });
  assert.equal((await s.closed).code, 1000);
  const errors = s.frames.filter((f) => f.error);
  assert.equal(errors.length, 2, JSON.stringify(errors));
  for (const e of errors) assert.match(e.message, /voice_settings and generation_config apply from the first message only: these were not applied/);
  const bodies = host.seen.slice(-3).map((r) => r.body);
  assert.deepEqual(bodies.map((b) => b.input), ['First part. ', 'Second part. ', 'Third. ']);
  for (const b of bodies) {
    assert.deepEqual(b.voice_settings, { stability: 0.3 }, 'the first frame\'s settings, every generation');
    assert.equal(b.speed, 0.8);
    assert.equal(b.enable_ssml_parsing, true);
  }

  const calls = host.seen.length;
  s = await connect(gw, key, 'model_id=host-tts-plain');
  s.send({ text: ' ', voice_settings: { similarity_boost: 0.2 } });
  const closed = await s.closed;
  assert.equal(closed.code, 1008);
  assert.match(JSON.stringify(s.frames) + closed.reason, /voice_settings\.similarity_boost is not supported by model host-tts-plain/);
  s = await connect(gw, key, 'model_id=host-tts-plain');
  s.send({ text: ' ', voice_settings: { stability: 'high' } });
  assert.equal((await s.closed).code, 1008);
  let r = await connect(gw, key, 'model_id=host-tts-plain&enable_ssml_parsing=true');
  assert.equal(r.refused?.status, 422);
  assert.deepEqual(r.refused.body.detail[0].loc, ['query', 'enable_ssml_parsing']);
  assert.match(r.refused.body.error.message, /models that take it: host-tts\./);
  r = await connect(gw, key, 'model_id=host-tts&enable_ssml_parsing=maybe');
  assert.equal(r.refused?.status, 422);
  assert.equal(host.seen.length, calls, 'nothing refused reached the host');

  // The defaults (the family's documented first frame) and enable_ssml_parsing=false pass on any model.
  s = await connect(gw, key, 'model_id=host-tts-plain&enable_ssml_parsing=false');
  s.send({ text: ' ', voice_settings: { ...DEFAULTS, speed: 1 } });
  s.send({ text: 'Plain. ' });
  s.send({ text: '' });
  assert.equal((await s.closed).code, 1000);
  assert.equal('voice_settings' in host.seen.at(-1).body, false);
  assert.equal('enable_ssml_parsing' in host.seen.at(-1).body, false);

  // multi-stream-input: a context whose settings cannot be honoured is not opened; another one is.
  s = await connect(gw, key, 'model_id=host-tts-plain', 'multi-stream-input');
  s.send({ text: ' ', context_id: 'a', voice_settings: { style: 0.7 } });
  s.send({ text: ' ', context_id: 'b', voice_settings: DEFAULTS });
  s.send({ text: 'Bee. ', context_id: 'b', flush: true });
  s.send({ close_socket: true });
  assert.equal((await s.closed).code, 1000);
  const err = s.frames.find((f) => f.error);
  assert.match(err?.message ?? '', /voice_settings\.style is not supported by model host-tts-plain.*The context was not opened/);
  assert.deepEqual([...new Set(s.frames.filter((f) => f.audio).map((f) => f.contextId))], ['b'], 'audio for b only (in one or more frames)');
  await assertInvariants(assert, gw, account);
});

test('speech to speech sends voice_settings (with speed) on to a sts model that lists them and refuses a non-default one for one that does not', async (t) => {
  const host = await recordingHost(t);
  const gw = await startGateway(t, CONFIG(host));
  const { key, account } = await gw.account('5');
  const convert = (model, vs) => {
    const f = new FormData();
    f.append('audio', new Blob([wav(0.5)], { type: 'audio/wav' }), 'in.wav');
    f.append('model_id', model);
    if (vs !== undefined) f.append('voice_settings', typeof vs === 'string' ? vs : JSON.stringify(vs));
    return gw.fetch(`/beta/v1/speech-to-speech/${RACHEL}?output_format=pcm_24000`, { method: 'POST', headers: xi(key), body: f });
  };
  let res = await convert('host-sts', { stability: 0.1, speed: 1.2 });
  assert.equal(res.status, 200, await res.clone().text());
  await res.arrayBuffer();
  assert.match(host.seen.at(-1).body, /name="voice_settings"\r\n\r\n\{"stability":0\.1,"speed":1\.2\}\r\n/);

  const calls = host.seen.length;
  const before = await balanceNano(gw, key);
  for (const [setting, value] of [['stability', 0.1], ['use_speaker_boost', false], ['speed', 0.8]]) {
    res = await convert('host-sts-plain', { [setting]: value });
    assert.equal(res.status, 422, setting);
    const body = await res.json();
    assert.deepEqual(body.detail[0].loc, ['body', 'voice_settings', setting]);
    assert.match(body.error.message, /models that take it: host-sts\./);
  }
  res = await convert('host-sts-plain', { stability: 7 });
  assert.equal(res.status, 422);
  assert.deepEqual((await res.json()).detail[0].loc, ['body', 'voice_settings', 'stability']);
  assert.equal(host.seen.length, calls);
  assert.equal(await balanceNano(gw, key), before, 'nothing billed for refusals');

  res = await convert('host-sts-plain', { ...DEFAULTS, speed: 1 });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  assert.doesNotMatch(host.seen.at(-1).body, /voice_settings/);
  await assertInvariants(assert, gw, account);
});

test('the embedded default\'s sim models list neither voice_settings nor enable_ssml_parsing: asked for, they are refused; the defaults pass', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const { key, account } = await gw.account('5');
  let res = await gw.fetch(`/beta/v1/text-to-speech/${RACHEL}?output_format=pcm_24000`, { method: 'POST', headers: xi(key, json),
    body: JSON.stringify({ text: 'Hi.', model_id: 'eleven_multilingual_v2', voice_settings: { stability: 0.2 } }) });
  assert.equal(res.status, 422);
  assert.match((await res.json()).error.message, /voice_settings\.stability is not supported by model sim-tts.*no model of this gateway takes it/);
  res = await gw.fetch(`/beta/v1/text-to-speech/${RACHEL}?output_format=pcm_24000`, { method: 'POST', headers: xi(key, json),
    body: JSON.stringify({ text: 'Hi.', voice_settings: { ...DEFAULTS, speed: 1 } }) });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const r = await connect(gw, key, 'enable_ssml_parsing=true');
  assert.equal(r.refused?.status, 422);
  assert.equal(r.refused.body.error.param, 'enable_ssml_parsing');
  const f = new FormData();
  f.append('audio', new Blob([wav(0.5)], { type: 'audio/wav' }), 'in.wav');
  f.append('voice_settings', JSON.stringify({ style: 0.5 }));
  res = await gw.fetch(`/beta/v1/speech-to-speech/${RACHEL}?output_format=pcm_24000`, { method: 'POST', headers: xi(key), body: f });
  assert.equal(res.status, 422);
  assert.deepEqual((await res.json()).detail[0].loc, ['body', 'voice_settings', 'style']);
  await assertInvariants(assert, gw, account);
});

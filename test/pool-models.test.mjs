// `upstream_model` per upstream of a pool (issue 27): whichever upstream answers gets the model name it knows,
// on every text route, the Responses API translated to chat included.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startGateway, bearer, assertInvariants } from './helpers/gateway.mjs';
import { startStub, startRecorder, errorReply } from './helpers/stub-upstream.mjs';
import { wav } from './helpers/wav.mjs';

test('each upstream of a pool is sent its own upstream_model: chat, completions and a Responses request translated to chat all reach the second upstream under its name after the first answers 503', { timeout: 240_000 }, async (t) => {
  const busy = await startStub(t);
  busy.reply = errorReply(503);
  const rec = await startRecorder(t);
  const gw = await startGateway(t, {
    store: 'postgres',
    upstreams: { busy: { base_url: busy.url }, rec: { base_url: rec.url } },
    models: [{
      id: 'pooled-chat', kind: 'chat', upstream_model: 'name-of-the-model', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096,
      upstream: [{ name: 'busy', upstream_model: 'name-on-busy' }, { name: 'rec', priority: 1, upstream_model: 'name-on-rec' }],
    }],
  });
  const { key, account } = await gw.account('5');
  const post = (path, body) => fetch(`${gw.url}/v1${path}`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const replies = [
    await post('/chat/completions', { model: 'pooled-chat', messages: [{ role: 'user', content: 'hi' }] }),
    await post('/completions', { model: 'pooled-chat', prompt: 'hi' }),
    await post('/responses', { model: 'pooled-chat', input: 'hi' }),
  ];
  for (const r of replies) assert.equal(r.status, 200, await r.clone().text());
  const bodies = await Promise.all(replies.map((r) => r.json()));
  assert.deepEqual(bodies.map((b) => b.model), ['pooled-chat', 'pooled-chat', 'pooled-chat'], 'the client sees the model it asked for');
  assert.equal(busy.count('POST /v1/'), 3, 'the first upstream was tried for each');
  assert.deepEqual(rec.paths, ['/v1/chat/completions', '/v1/completions', '/v1/chat/completions']);
  assert.deepEqual(rec.bodies.map((b) => b.model), ['name-on-rec', 'name-on-rec', 'name-on-rec'], 'the answering upstream got its own model name');
  await assertInvariants(assert, gw, account);
});

test('speech and transcription models name their model per upstream too: speech (both families) and transcription (both families) reach the second upstream under its name after the first answers 503', { timeout: 240_000 }, async (t) => {
  const busy = await startStub(t);
  busy.reply = errorReply(503);
  // The second upstream: answers speech with a few bytes of mp3 and a transcription with its text, keeping the model each was asked for.
  const seen = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST') { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"object":"list","data":[]}'); return; }
      const raw = Buffer.concat(chunks).toString('latin1');
      if (req.url === '/v1/audio/speech') {
        seen.push([req.url, JSON.parse(raw).model]);
        res.writeHead(200, { 'content-type': 'audio/mpeg' }); res.end(Buffer.alloc(417, 0)); return;
      }
      seen.push([req.url, /name="model"\r\n\r\n([^\r]*)/.exec(raw)?.[1]]);
      res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"text":"hello there"}');
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }));
  const pool = [{ name: 'busy', upstream_model: 'voice-on-busy' }, { name: 'second', priority: 1, upstream_model: 'voice-on-second' }];
  const gw = await startGateway(t, {
    store: 'postgres',
    upstreams: { busy: { base_url: busy.url, health: { eject_after: 100 } }, second: { base_url: `http://127.0.0.1:${server.address().port}` } },
    models: [
      { id: 'pooled-tts', kind: 'tts', upstream_model: 'the-voice-model', per_mchar: '15', upstream: pool },
      { id: 'pooled-stt', kind: 'stt', upstream_model: 'the-ear-model', audio_in_per_minute: '0.006', upstream: pool.map((e) => ({ ...e, upstream_model: e.upstream_model.replace('voice', 'ear') })) },
    ],
  });
  const { key, account } = await gw.account('5');
  const speech = await fetch(`${gw.url}/v1/audio/speech`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'pooled-tts', voice: 'alloy', input: 'Hello there.', response_format: 'mp3' }) });
  assert.equal(speech.status, 200, await speech.clone().text());
  await speech.arrayBuffer();
  const beta = await fetch(`${gw.url}/beta/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb?output_format=mp3_44100_128`, { method: 'POST', headers: { 'xi-api-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ model_id: 'pooled-tts', text: 'Hello there.' }) });
  assert.equal(beta.status, 200, await beta.clone().text());
  await beta.arrayBuffer();
  const form = () => { const f = new FormData(); f.append('file', new Blob([wav(2)], { type: 'audio/wav' }), 'a.wav'); return f; };
  const f1 = form(); f1.append('model', 'pooled-stt');
  const stt = await fetch(`${gw.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: f1 });
  assert.equal(stt.status, 200, await stt.clone().text());
  assert.equal((await stt.json()).text, 'hello there');
  const f2 = form(); f2.append('model_id', 'pooled-stt');
  const betaStt = await fetch(`${gw.url}/beta/v1/speech-to-text`, { method: 'POST', headers: { 'xi-api-key': key }, body: f2 });
  assert.equal(betaStt.status, 200, await betaStt.clone().text());
  assert.equal((await betaStt.json()).text, 'hello there');
  assert.equal(busy.count('POST /v1/audio/'), 4, 'the first upstream was tried for each');
  assert.deepEqual(seen, [
    ['/v1/audio/speech', 'voice-on-second'], ['/v1/audio/speech', 'voice-on-second'],
    ['/v1/audio/transcriptions', 'ear-on-second'], ['/v1/audio/transcriptions', 'ear-on-second'],
  ], 'the answering upstream got its own model name');
  await assertInvariants(assert, gw, account);
});

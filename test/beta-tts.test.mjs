// The beta family's text to speech: refusals before any upstream (validation, output_format, voices, limits) bill nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, assertInvariants } from './helpers/gateway.mjs';

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
    res = await post(`${path}?output_format=wav_44100`, { text: 'Hello.' });
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

// Beta speech to text: the client's parameters an upstream honours (config `upstreams.NAME.transcription.stt_params`)
// reach it as form fields of the same name; the same parameters are refused by name for an upstream that does not list
// them, and nothing is fetched for a source_url. The upstream here is a small recording server (what Tollgate sent on).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { startGateway, assertInvariants, TEST_MODELS } from './helpers/gateway.mjs';
import { wav } from './helpers/wav.mjs';

const teardown = [];
after(async () => { for (const fn of teardown.reverse()) await fn(); });

/** A transcription upstream that answers json and keeps each request's form fields (file apart). */
async function recordingUpstream() {
  const seen = [];
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const form = await new Request('http://x', { method: 'POST', headers: { 'content-type': req.headers['content-type'] }, body: Buffer.concat(chunks) }).formData();
    const fields = {};
    for (const [k, v] of form.entries()) if (typeof v === 'string') (fields[k] ??= []).push(v);
    seen.push({ path: req.url, fields });
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ text: 'Heard it.' }));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  teardown.push(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${server.address().port}`, seen };
}

const ALL = ['tag_audio_events', 'keyterms', 'no_verbatim', 'numbers_format', 'seed', 'secondary_language_codes', 'entity_redaction', 'entity_redaction_mode'];
const ASKED = { tag_audio_events: ['false'], keyterms: ['Tollgate', 'nanodollar'], no_verbatim: ['true'], numbers_format: ['words'], seed: ['7'],
  secondary_language_codes: ['de'], entity_redaction: ['pii'], entity_redaction_mode: ['redacted'] };
/** $0.006 per minute = 100 nanodollars a millisecond. */
const PER_MS = 100n;

test('stt parameters an upstream lists in stt_params are sent on to it by name; for one that lists none they are refused by name, nothing billed', async () => {
  const up = await recordingUpstream();
  const stt = (id, upstream) => ({ id, upstream, upstream_model: 'whisper-1', kind: 'stt', audio_in_per_minute: '0.006' });
  const gw = await startGateway({ after: (f) => teardown.push(f) }, {
    store: 'pglite',
    upstreams: {
      sim: { sim: {} },
      taking: { base_url: up.url, transcription: { response_formats: ['json'], stream: false, stt_params: ALL } },
      plain: { base_url: up.url, transcription: { response_formats: ['json'], stream: false } },
    },
    models: [...TEST_MODELS, stt('taking-stt', 'taking'), stt('plain-stt', 'plain')],
  });
  const { key, account } = await gw.account('1');
  const balance = async () => BigInt(Math.round((await gw.cli('account', 'show', account)).balance * 1e9));
  const post = (model, fields) => {
    const form = new FormData();
    form.append('model_id', model);
    form.append('file', new Blob([wav(1.5, { amp: 0 })], { type: 'audio/wav' }), 'a.wav');
    for (const [k, vs] of Object.entries(fields)) for (const v of vs) form.append(k, v);
    return gw.fetch('/beta/v1/speech-to-text', { method: 'POST', headers: { 'xi-api-key': key }, body: form });
  };

  let before = await balance();
  const res = await post('taking-stt', ASKED);
  assert.equal(res.status, 200, await res.clone().text());
  assert.equal((await res.json()).text, 'Heard it.');
  const sent = up.seen.at(-1).fields;
  for (const [name, values] of Object.entries(ASKED)) assert.deepEqual(sent[name], values, `${name} sent on as the client gave it`);
  assert.equal(before - (await balance()), 1500n * PER_MS);

  for (const [name, values] of Object.entries(ASKED)) {
    before = await balance();
    const count = up.seen.length;
    const refused = await post('plain-stt', { [name]: values });
    assert.equal(refused.status, 422, name);
    const body = await refused.json();
    assert.deepEqual(body.detail[0].loc, ['body', name]);
    assert.equal(body.error.code, 'unsupported_parameter');
    assert.match(body.error.message, new RegExp(`${name} is not supported by model plain-stt`));
    assert.equal(up.seen.length, count, 'the upstream was not called');
    assert.equal(await balance(), before, 'nothing billed');
  }
  // at their defaults they ask for nothing, and nothing of them is sent
  const plain = await post('plain-stt', { tag_audio_events: ['true'], no_verbatim: ['false'], keyterms: [] });
  assert.equal(plain.status, 200);
  assert.deepEqual(Object.keys(up.seen.at(-1).fields).filter((k) => ALL.includes(k)), []);
  await assertInvariants(assert, gw, account);
});

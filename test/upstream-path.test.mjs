// The path an upstream is sent: what http-proxy-3 made of a path and the base URL's by parsing both on every
// request, now with no URL parsed for a path already in its normal form (issue 29).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Upstreams, isNormalPath } from '../dist/proxy/upstream.js';
import { embeddedConfig } from '../dist/config.js';

/** An upstream that answers 200 and records the path of each request it is sent. */
async function recorder() {
  const paths = [];
  const server = http.createServer((req, res) => { paths.push(req.url); req.resume(); req.on('end', () => res.end('{}')); });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { paths, url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

function upstreams(baseUrls) {
  const base = embeddedConfig().upstreams.get('sim');
  return new Upstreams(new Map(Object.entries(baseUrls).map(([name, url]) => [name, { ...base, name, baseUrl: url, sim: undefined }])), new Map(), 1);
}

async function send(ups, name, path) {
  const call = ups.call(name, 'POST', path, { 'content-type': 'application/json' }, Buffer.from('{}'), 'req-1');
  const res = await call.response;
  res.resume();
  await new Promise((r) => res.on('end', r));
}

/** What a WHATWG parse makes of a path, after the base URL's path and with its query first: what http-proxy-3 1.23 sent by default. */
function normalised(prefix, path, baseQuery = '') {
  const u = new URL(path.startsWith('//') ? `http://base.invalid${path}` : path, 'http://base.invalid');
  const query = [baseQuery, u.search.slice(1)].filter(Boolean).join('&');
  return prefix + u.pathname + (query ? `?${query}` : '');
}

const PATHS = [
  '/v1/chat/completions',
  '/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/stream?output_format=mp3_44100_128&enable_logging=true',
  '/v1/text-to-speech/voice%20one/stream?a=b?c',
  '/v1/text-to-speech/../stream',           // a dot segment: resolved
  '/v1/text-to-speech/%2E%2E/stream',       // the same, encoded
  "/v1/speech-to-text?note='quoted'",       // ' is encoded in a query
  '/v1/speech-to-text?note="x"&y=<z>',
  '/v1/speech-to-text?',                    // an empty query is dropped
  '/v1/a b',                                // a space is encoded
  '/v1/é',
  '/v1/a//b',
  '//v1/x',                                 // not a host: a path
];

test('the path an upstream receives: as a URL parse leaves it, joined to the base URL\'s path, for normal paths and the rest alike', async (t) => {
  const up = await recorder();
  t.after(() => up.close());
  const ups = upstreams({ root: up.url, prefixed: `${up.url}/openai`, slashed: `${up.url}/openai/`, queried: `${up.url}/deployments/x?api-version=2024-10-21` });
  t.after(() => ups.close());
  for (const [name, prefix, query] of [['root', ''], ['prefixed', '/openai'], ['slashed', '/openai'], ['queried', '/deployments/x', 'api-version=2024-10-21']]) {
    for (const path of PATHS) {
      await send(ups, name, path);
      assert.equal(up.paths.at(-1), normalised(prefix, path, query), `${name} ${path}`);
    }
  }
});

test('a path in its normal form is sent with no URL parsed for it; one that is not is still parsed', async (t) => {
  const up = await recorder();
  t.after(() => up.close());
  const ups = upstreams({ prefixed: `${up.url}/openai` });
  t.after(() => ups.close());
  await send(ups, 'prefixed', '/v1/chat/completions'); // the target's own URL is parsed once, on the first call
  const Real = globalThis.URL;
  let parsed = 0;
  globalThis.URL = class extends Real { constructor(...a) { super(...a); parsed++; } };
  try {
    for (let i = 0; i < 5; i++) await send(ups, 'prefixed', '/v1/chat/completions');
    assert.equal(parsed, 0, 'no URL parsed for five normal paths');
    await send(ups, 'prefixed', '/v1/x/../chat/completions');
    assert.ok(parsed > 0, 'a path with a dot segment is parsed');
  } finally {
    globalThis.URL = Real;
  }
  assert.deepEqual(up.paths.slice(-2), ['/openai/v1/chat/completions', '/openai/v1/chat/completions']);
});

test('isNormalPath holds only for paths a URL parse leaves unchanged (random paths)', () => {
  const alphabet = ['a', 'Z', '0', '_', '-', '.', '~', '/', '?', '&', '=', '%', '2', 'e', 'E', ':', '@', '!', '$', "'", '"', '(', ')', '*', '+', ',', ';',
    ' ', '#', '<', '>', '\\', '`', '{', '}', '|', '^', '[', ']', 'é', '\t'];
  let seed = 29;
  const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  let normal = 0;
  for (let i = 0; i < 20000; i++) {
    let p = '/';
    for (let n = rand(12); n > 0; n--) p += alphabet[rand(alphabet.length)];
    if (!isNormalPath(p)) continue;
    normal++;
    assert.equal(normalised('', p), p, `isNormalPath(${JSON.stringify(p)}) but a parse changes it`);
  }
  assert.ok(normal > 1000, `enough normal paths drawn (${normal})`);
  for (const p of ['/v1/chat/completions', '/v1/text-to-speech/abc/stream?output_format=mp3_44100_128']) assert.ok(isNormalPath(p), p);
});

// An upstream at an https:// base URL (a hosted OpenAI-compatible server, ElevenLabs' own API): its requests and
// health probes go over TLS, its certificate checked against the CAs Node trusts (NODE_EXTRA_CA_CERTS adds one).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import https from 'node:https';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSim } from '../dist/sim/index.js';
import { startGateway, bearer, priceNano, balanceNano, dollarsToNano } from './helpers/gateway.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A self-signed certificate for 127.0.0.1, made by openssl in a scratch directory. */
function certificate(t) {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-tls-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1',
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' });
  return { certFile: join(dir, 'cert.pem'), key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
}

/** An HTTPS server in front of `sim`: it records each request it is sent (method, path, over TLS) and forwards it. */
async function tlsInFront(t, tls, simUrl) {
  const seen = [];
  const server = https.createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    seen.push({ method: req.method, url: req.url, encrypted: req.socket.encrypted === true });
    const fwd = http.request(simUrl + req.url, { method: req.method, headers: { ...req.headers, host: new URL(simUrl).host } }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    req.pipe(fwd);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }));
  return { url: `https://127.0.0.1:${server.address().port}`, seen };
}

async function setUp(t, env) {
  const tls = certificate(t);
  const sim = await startSim();
  t.after(() => sim.close());
  const a = await tlsInFront(t, tls, sim.url);
  const b = await tlsInFront(t, tls, sim.url);
  const up = (url) => ({ base_url: url, health: { probe_interval_ms: 200 } });
  // A pool of two, so each is probed (a pool of one is never probed).
  const models = [{ id: 'm', upstream: [{ name: 'a', priority: 0 }, { name: 'b', priority: 1 }], upstream_model: 'sim-chat', kind: 'chat',
    input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 }];
  const gw = await startGateway(t, { store: 'pglite', upstreams: { a: up(a.url), b: up(b.url) }, models, env: env(tls) });
  const { account, key } = await gw.account('10');
  return { gw, account, key, a, b };
}

function chat(gw, key) {
  return gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }) });
}

test('an https:// upstream is called over TLS and probed over TLS; the reply is billed as any other', async (t) => {
  const { gw, account, key, a, b } = await setUp(t, (tls) => ({ NODE_EXTRA_CA_CERTS: tls.certFile }));
  const res = await chat(gw, key);
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  assert.equal(body.object, 'chat.completion');
  const sent = a.seen.filter((r) => r.method === 'POST');
  assert.deepEqual(sent, [{ method: 'POST', url: '/v1/chat/completions', encrypted: true }], `a saw ${JSON.stringify(a.seen)}; b saw ${JSON.stringify(b.seen)}`);
  const { prompt_tokens: p, completion_tokens: c } = body.usage;
  assert.equal(await balanceNano(gw, account), dollarsToNano('10') - priceNano(p, c));
  // Both upstreams of the pool are probed, over TLS.
  for (let i = 0; i < 150 && !(a.seen.some((r) => r.method === 'GET') && b.seen.some((r) => r.method === 'GET')); i++) await sleep(100);
  for (const s of [a, b]) assert.ok(s.seen.some((r) => r.method === 'GET' && r.url === '/v1/models' && r.encrypted), `probed over TLS: saw ${JSON.stringify(s.seen)}`);
});

test('an https:// upstream whose certificate Node does not trust is refused: the client gets upstream_unavailable, nothing is billed', async (t) => {
  const { gw, account, key, a, b } = await setUp(t, () => ({ NODE_EXTRA_CA_CERTS: '' }));
  const res = await chat(gw, key);
  const body = await res.json();
  assert.ok(res.status >= 500, `status ${res.status}`);
  assert.equal(body.error.code, 'upstream_unavailable');
  assert.equal(a.seen.length + b.seen.length, 0, 'no request got past the TLS handshake');
  assert.equal(await balanceNano(gw, account), dollarsToNano('10'));
});

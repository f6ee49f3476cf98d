// The front ends (issue 25): node:http serves on Node 22 and 24 (npm's official Node packages, via
// test/node-versions) and on Node 20 when chosen; uWS is the default where its binary loads; a front end
// that cannot load stops the start with what works.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { startGateway, assertInvariants, bearer, chatBody, priceNano, dollarsToNano, CLI, balanceNano, nodeBinary } from './helpers/gateway.mjs';

/** sim-tts: $15 per million characters. */
const PER_CHAR = 15_000n;
const VOICE = 'JBFqnCBsd6RMkjVDRZzb';

/** Opens a stream-input socket; resolves with its frames and close, or with the HTTP refusal. */
function speak(gw, headers, messages) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${gw.url.replace(/^http/, 'ws')}/beta/v1/text-to-speech/${VOICE}/stream-input?output_format=pcm_16000&model_id=sim-tts`, { headers });
    const frames = [];
    ws.on('message', (d) => frames.push(JSON.parse(d.toString())));
    ws.on('open', () => { for (const m of messages) ws.send(JSON.stringify(m)); });
    ws.on('close', (code) => resolve({ code, frames }));
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ refused: { status: res.statusCode, body: JSON.parse(body) } }));
    });
    ws.on('error', (e) => { if (!String(e.message).includes('Unexpected server response')) reject(e); });
  });
}

/** Reads an SSE chat stream to its end; returns the parsed chunks. */
async function sseChunks(res) {
  const text = await res.text();
  return text.split('\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]').map((l) => JSON.parse(l.slice(6)));
}

/** What a user does on a fresh gateway: a chat, a streamed chat and a speech session, each billed exactly. */
async function servesAndBills(t, gw, frontend) {
  assert.match(gw.output.stdout, new RegExp(`Front end: +${frontend === 'node' ? 'node:http' : 'uWS'}`), 'the banner names the front end');
  const metrics = await (await gw.fetch('/metrics')).text();
  assert.match(metrics, new RegExp(`^tollgate_frontend_info\\{frontend="${frontend}"\\} 1$`, 'm'));
  const { key, account } = await gw.account('2');

  const plain = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'x-request-id': 'req-frontend-test-1' }, body: chatBody({ seed: 5 }) });
  assert.equal(plain.status, 200);
  assert.equal(plain.headers.get('x-request-id'), 'req-frontend-test-1', 'the client\'s request id is kept');
  const u1 = (await plain.json()).usage;

  const streamed = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody({ seed: 6, stream: true, stream_options: { include_usage: true } }) });
  assert.equal(streamed.status, 200);
  assert.match(streamed.headers.get('content-type'), /text\/event-stream/);
  const chunks = await sseChunks(streamed);
  const u2 = chunks.at(-1).usage;
  assert.ok(chunks.length > 2 && u2, 'a stream of chunks ending in usage');

  const refused = await speak(gw, { 'xi-api-key': 'svc_live_notarealkeyatall0000000000000000000' }, []);
  assert.equal(refused.refused?.status, 401, 'a refused upgrade is an HTTP error');
  assert.equal(refused.refused.body.detail.status, 'invalid_api_key', 'in the beta envelope');

  const text = 'The node front end carries this session. ';
  const s = await speak(gw, { 'xi-api-key': key }, [{ text: ' ' }, { text, flush: true }, { text: '' }]);
  assert.equal(s.code, 1000);
  assert.equal(s.frames.filter((f) => f.audio).map((f) => f.alignment.chars.join('')).join(''), text);

  const spent = priceNano(u1.prompt_tokens, u1.completion_tokens) + priceNano(u2.prompt_tokens, u2.completion_tokens) + BigInt(text.length) * PER_CHAR;
  assert.equal(await balanceNano(gw, account), dollarsToNano('2') - spent, 'billed exactly: two chats and the characters spoken');
  await assertInvariants(assert, gw, account);
}

for (const major of [22, 24]) {
  test(`on Node ${major} (npm's Node package) the gateway serves with node:http, chosen by auto: chat, a stream and a WebSocket session are billed`, async (t) => {
    const node = nodeBinary(major);
    const gw = await startGateway(t, { store: 'pglite', node, env: { TOLLGATE_FRONTEND: '' } });
    assert.doesNotMatch(gw.output.stdout + gw.output.stderr, /Falling back/, 'no uWS fallback');
    await servesAndBills(t, gw, 'node');
  });
}

test('on this Node with frontend: "node" the gateway serves with node:http: chat, a stream and a WebSocket session are billed', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', frontend: 'node', env: { TOLLGATE_FRONTEND: '' } });
  await servesAndBills(t, gw, 'node');
});

/** Connections opened at once while the gateway is stopped: past Node's default listen backlog (511). */
const BURST = 1500;
const somaxconn = Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));

test(`node:http: ${BURST} connections opened while the gateway is busy are queued by the kernel, not dropped, and each is answered`,
  { skip: somaxconn < BURST && `net.core.somaxconn is ${somaxconn}: the kernel caps the backlog below ${BURST}` }, async (t) => {
    const gw = await startGateway(t, { store: 'pglite', frontend: 'node', env: { TOLLGATE_FRONTEND: '' } });
    const port = Number(new URL(gw.url).port);
    // A stopped process stands for a busy one (a long turn of its event loop): the kernel alone answers handshakes.
    process.kill(gw.proc.pid, 'SIGSTOP');
    let stopped = true;
    t.after(() => { if (stopped) process.kill(gw.proc.pid, 'SIGCONT'); });
    const sockets = [];
    let connected = 0;
    for (let i = 0; i < BURST; i++) {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => { connected++; });
      s.on('error', () => undefined);
      sockets.push(s);
    }
    // A handshake the kernel dropped (a full accept queue) is retried by the client only after a second or more.
    await new Promise((r) => setTimeout(r, 2000));
    const whileBusy = connected;
    process.kill(gw.proc.pid, 'SIGCONT');
    stopped = false;
    const answers = await Promise.all(sockets.map((s) => new Promise((resolve) => {
      let head = '';
      const done = () => { resolve(head.slice(0, 12) || 'no answer'); s.destroy(); };
      s.on('data', (d) => { head += d; if (head.includes('\r\n\r\n')) done(); });
      s.once('close', done);
      s.setTimeout(30_000, done);
      s.write('GET /health HTTP/1.1\r\nhost: tollgate\r\n\r\n');
    })));
    assert.equal(whileBusy, BURST, `every handshake completed while the gateway was busy (Node's default backlog queues 512)`);
    assert.deepEqual(answers.filter((a) => a !== 'HTTP/1.1 200'), [], 'every connection is answered 200');
  });

test('on Node 20 auto serves with uWS, whose binary loads there', { skip: process.versions.modules !== '115' && 'uWS has a binary for Node 20 only among the versions this project runs on' }, async (t) => {
  const gw = await startGateway(t, { store: 'pglite', env: { TOLLGATE_FRONTEND: '' } });
  await servesAndBills(t, gw, 'uws');
});

test('forcing frontend uws on Node 22 exits non-zero before serving, saying which Node versions work and what to set', async () => {
  const node = nodeBinary(22);
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-test-'));
  try {
    const r = await new Promise((resolve) => {
      execFile(node, [CLI, 'serve', '--data-dir', dir, '--listen', '127.0.0.1:0'], { env: { ...process.env, TOLLGATE_FRONTEND: 'uws' }, timeout: 60_000 },
        (err, stdout, stderr) => resolve({ code: err?.code ?? 0, stdout, stderr }));
    });
    assert.notEqual(r.code, 0, 'the start fails');
    assert.doesNotMatch(r.stdout, /listening|Tollgate is running/, 'nothing was served');
    assert.match(r.stderr, /uWS front end \(frontend: "uws"\) cannot load on Node v22/);
    assert.match(r.stderr, /Node 20/, 'says where uWS runs');
    assert.match(r.stderr, /"frontend": "node"|TOLLGATE_FRONTEND=node/, 'says what to set');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// Upstreams a test controls: a sim in its own process (to kill -9), and a tiny HTTP server answering what the test says.
import { spawn } from 'node:child_process';
import http from 'node:http';
import { CLI, NODE } from './gateway.mjs';

/** `node dist/cli.js sim` in a child process on port 0: { url, proc, kill() } (SIGKILL). Killed after the test. */
export async function spawnSim(t, args = []) {
  const proc = spawn(NODE, [CLI, 'sim', '--listen', '127.0.0.1:0', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  const url = await new Promise((resolve, reject) => {
    proc.stdout.on('data', (d) => {
      out += d;
      const m = /"url":"([^"]+)"/.exec(out);
      if (m) resolve(m[1]);
    });
    proc.once('exit', (code) => reject(new Error(`sim exited with ${code}: ${out}`)));
  });
  const kill = () => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); };
  t.after(kill);
  return { url, proc, kill };
}

/**
 * An HTTP server on port 0 whose answer the test sets: `stub.reply = (req, res) => ...` (default: 200 `{}`).
 * Counts requests by `METHOD path` in `stub.hits`. Closed after the test.
 */
export async function startStub(t) {
  const stub = {
    hits: [],
    reply: (_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{}'); },
    count(prefix) { return stub.hits.filter((h) => h.startsWith(prefix)).length; },
  };
  const server = http.createServer((req, res) => {
    stub.hits.push(`${req.method} ${req.url}`);
    req.resume();
    req.once('end', () => stub.reply(req, res));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  stub.url = `http://127.0.0.1:${server.address().port}`;
  stub.close = () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); });
  t.after(() => stub.close());
  return stub;
}

/** Answers an OpenAI-shaped error with `status` (and the given headers). */
export function errorReply(status, headers = {}) {
  return (_req, res) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify({ error: { message: `stub ${status}`, type: 'server_error', code: null } }));
  };
}

/** A port nothing listens on (bound, then closed): connections are refused. */
export async function refusedUrl() {
  const s = http.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const port = s.address().port;
  await new Promise((r) => s.close(r));
  return `http://127.0.0.1:${port}`;
}

/**
 * An upstream that keeps every JSON body it is sent (`rec.bodies`, with `rec.paths` beside them) and answers a
 * small chat completion, or a completion on /v1/completions. Closed after the test.
 */
export async function startRecorder(t) {
  const rec = { bodies: [], paths: [] };
  const server = http.createServer((req, res) => {
    let b = '';
    req.on('data', (c) => { b += c; });
    req.on('end', () => {
      // A GET (the pool's health probe, /v1/models) is answered and not recorded.
      if (req.method !== 'POST') { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"object":"list","data":[]}'); return; }
      rec.bodies.push(JSON.parse(b));
      rec.paths.push(req.url);
      const usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 };
      const choice = req.url === '/v1/completions' ? { index: 0, text: 'ok', finish_reason: 'stop' } : { index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'x', object: 'chat.completion', created: 1, model: 'rec', choices: [choice], usage }));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }));
  rec.url = `http://127.0.0.1:${server.address().port}`;
  return rec;
}

/** The usage every chatRecorder reply reports. */
export const RECORDER_TOKENS = { prompt: 3, output: 1 };

/**
 * A chat upstream that notes when each request arrived and whether its client closed it before the answer;
 * a body whose last message says "hang" is never answered, one that says "slow" 300 ms late.
 */
export async function chatRecorder(t) {
  const u = { seen: [] };
  const server = http.createServer((req, res) => {
    const entry = { at: Date.now(), closedEarly: false, answered: false };
    u.seen.push(entry);
    let b = '';
    req.on('data', (c) => { b += c; });
    res.on('close', () => { if (!entry.answered) entry.closedEarly = true; });
    req.on('end', () => {
      const said = JSON.parse(b).messages.at(-1).content;
      if (said === 'hang') return;
      setTimeout(() => {
        if (res.destroyed) return;
        entry.answered = true;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'c', object: 'chat.completion', created: 1, model: 'm',
          choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: RECORDER_TOKENS.prompt, completion_tokens: RECORDER_TOKENS.output, total_tokens: RECORDER_TOKENS.prompt + RECORDER_TOKENS.output } }));
      }, said === 'slow' ? 300 : 0);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }));
  u.url = `http://127.0.0.1:${server.address().port}`;
  return u;
}

// A stand-in for ElevenLabs' own API (we cannot reach the real one), built to its published OpenAPI and AsyncAPI specs
// (/work/shared/specs) and the official clients' types: real audio, its headers and JSON shapes, the stream-input socket.
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import busboy from 'busboy';
import { WebSocketServer } from 'ws';
import { synth, extractText } from '../../dist/sim/speech.js';
import { audioEncoder, bytes, parseWav, resample } from '../../dist/audio/index.js';

const RATE = 24_000; // synth()'s rate

/** The audio of `text` in an ElevenLabs output_format (mp3_R_K, pcm_R, ulaw_8000): real bytes a decoder reads. */
export function audioOf(text, format = 'mp3_44100_128') {
  const pcm = synth(text);
  const [codec, rateText, kbps] = format.split('_');
  const rate = Number(rateText);
  if (codec === 'pcm') return { body: bytes(resample(pcm, RATE, rate)), type: 'audio/pcm', seconds: pcm.length / RATE };
  if (codec !== 'mp3' && codec !== 'ulaw') throw new Error(`stand-in: output_format ${format} not made here`);
  const enc = audioEncoder(codec, { inRate: RATE, outRate: rate, kbps: Number(kbps) || 128 });
  const body = Buffer.concat([enc.push(bytes(pcm)), enc.end()]);
  return { body, type: codec === 'mp3' ? 'audio/mpeg' : 'audio/basic', seconds: pcm.length / RATE };
}

/** The REST alignment (AudioWithTimestampsResponse.alignment): each character 60 ms, as synth() speaks it. */
export function alignmentOf(text, offset = 0) {
  const chars = [...text];
  return {
    characters: chars,
    character_start_times_seconds: chars.map((_, i) => Math.round((offset + i * 0.06) * 1000) / 1000),
    character_end_times_seconds: chars.map((_, i) => Math.round((offset + (i + 1) * 0.06) * 1000) / 1000),
  };
}

function detail(res, status, code, message) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ detail: { status: code, message } }));
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}

function readForm(req) {
  return new Promise((resolve, reject) => {
    const fields = {};
    const files = [];
    const bb = busboy({ headers: req.headers });
    bb.on('field', (name, value) => { (fields[name] ??= []).push(value); });
    bb.on('file', (name, stream, info) => {
      const parts = [];
      stream.on('data', (d) => parts.push(d));
      stream.on('end', () => files.push({ name, filename: info.filename, mimeType: info.mimeType, data: Buffer.concat(parts) }));
    });
    bb.on('close', () => resolve({ fields, files }));
    bb.on('error', reject);
    req.pipe(bb);
  });
}

/** Its premade voices (ids from the family's voice list) and the voices cloned on it. */
const PREMADE = new Set(['21m00Tcm4TlvDq8ikWAM', 'JBFqnCBsd6RMkjVDRZzb', 'EXAVITQu4vr4xnSDxMaL']);
/** The text-to-speech models it has (another model_id is 404 `model_not_found`, as ElevenLabs answers an unknown or retired model). */
const TTS_MODELS = new Set(['eleven_multilingual_v2', 'eleven_flash_v2_5']);
/** ElevenLabs closes a multi-context socket that opens a sixth context at once (1008, `max_active_conversations`). */
const MAX_CONTEXTS = 5;

/**
 * Starts the stand-in on port 0. `apiKey`: the only key it takes (401 otherwise, as ElevenLabs answers a
 * bad key). Returns { url, requests (method, path, query, headers, json | form), voices, sockets, apiKey, close() }.
 */
export async function startElevenLabs(t, apiKey, script = false) {
  const requests = [];
  const voices = new Map();
  const sockets = [];
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    const seen = { method: req.method, path: url.pathname, query: Object.fromEntries(url.searchParams), headers: req.headers };
    requests.push(seen);
    // Run as a script (for the Python suite), its record is read here: a test control, not ElevenLabs' API.
    if (req.method === 'GET' && url.pathname === '/_standin/requests' && script) {
      requests.pop();
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify(requests.map((r) => ({ ...r, form: r.form && { fields: r.form.fields, files: r.form.files.map((f) => f.name) } }))));
    }
    if (req.headers['xi-api-key'] !== standin.apiKey) { req.resume(); return detail(res, 401, 'invalid_api_key', 'Invalid API key'); }
    // A test control: the next request is answered with this error (status, ElevenLabs' body, headers) as ElevenLabs would answer it.
    const fail = standin.failures.shift();
    if (fail) {
      req.resume();
      res.writeHead(fail.status, { 'content-type': 'application/json', ...fail.headers });
      return res.end(JSON.stringify(fail.body));
    }
    const known = (v) => PREMADE.has(v) || voices.has(v);
    const head = (text) => ({ 'request-id': randomBytes(10).toString('hex'), 'history-item-id': randomBytes(10).toString('hex'), 'x-character-count': String([...text].length) });
    let m;
    if (req.method === 'POST' && (m = /^\/v1\/text-to-speech\/([^/]+)(\/stream)?(\/with-timestamps)?$/.exec(url.pathname))) {
      const body = JSON.parse((await readBody(req)).toString('utf8'));
      seen.json = body;
      if (!known(m[1])) return detail(res, 404, 'voice_not_found', `A voice with voice_id '${m[1]}' was not found.`);
      if (body.model_id !== undefined && !TTS_MODELS.has(body.model_id)) return detail(res, 404, 'model_not_found', `A model with model_id '${body.model_id}' was not found.`);
      const a = audioOf(body.text, url.searchParams.get('output_format') ?? 'mp3_44100_128');
      if (!m[3]) {
        res.writeHead(200, { 'content-type': a.type, ...head(body.text) });
        // A test control: text with "[cut]" in it breaks off after its first quarter (the connection reset).
        if (body.text.includes('[cut]')) { res.write(a.body.subarray(0, a.body.length >> 2)); setTimeout(() => res.socket.destroy(), 50); return; }
        // streamed in a few reads, as the real one streams
        const step = Math.ceil(a.body.length / 4);
        for (let i = 0; i < a.body.length; i += step) res.write(a.body.subarray(i, i + step));
        return res.end();
      }
      const align = alignmentOf(body.text);
      if (!m[2]) {
        res.writeHead(200, { 'content-type': 'application/json', ...head(body.text) });
        if (body.text.includes('[cut]')) { res.write('{"audio_base64": "'); setTimeout(() => res.socket.destroy(), 50); return; }
        return res.end(JSON.stringify({ audio_base64: a.body.toString('base64'), alignment: align, normalized_alignment: align }));
      }
      // stream/with-timestamps: one JSON object a line, each with its audio and the alignment of its characters
      res.writeHead(200, { 'content-type': 'application/json', ...head(body.text) });
      const words = body.text.split(/(?<= )/);
      let at = 0;
      for (const w of words) {
        const piece = audioOf(w, url.searchParams.get('output_format') ?? 'mp3_44100_128');
        const al = alignmentOf(w, at * 0.06);
        res.write(`${JSON.stringify({ audio_base64: piece.body.toString('base64'), alignment: al, normalized_alignment: al })}\n`);
        at += [...w].length;
      }
      return res.end();
    }
    if (req.method === 'POST' && (m = /^\/v1\/speech-to-speech\/([^/]+)(\/stream)?$/.exec(url.pathname))) {
      const form = await readForm(req);
      seen.form = form;
      if (!known(m[1])) return detail(res, 404, 'voice_not_found', `A voice with voice_id '${m[1]}' was not found.`);
      const text = 'converted speech';
      const a = audioOf(text, url.searchParams.get('output_format') ?? 'mp3_44100_128');
      res.writeHead(200, { 'content-type': a.type, 'request-id': randomBytes(10).toString('hex') });
      return res.end(a.body);
    }
    if (req.method === 'POST' && url.pathname === '/v1/speech-to-text') {
      const form = await readForm(req);
      seen.form = form;
      const file = form.files.find((f) => f.name === 'file');
      if (!file) return detail(res, 422, 'invalid_request', 'file is required');
      const w = parseWav(file.data);
      const text = (w && extractText(new Int16Array(w.data.buffer.slice(w.data.byteOffset, w.data.byteOffset + (w.data.length & ~1))))) ?? 'hello';
      const words = [];
      let t0 = 0;
      for (const word of text.split(' ')) {
        if (words.length) { words.push({ text: ' ', start: t0, end: t0, type: 'spacing', logprob: 0 }); }
        const end = Math.round((t0 + [...word].length * 0.06) * 1000) / 1000;
        words.push({ text: word, start: t0, end, type: 'word', logprob: -0.01 });
        t0 = end;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'request-id': randomBytes(10).toString('hex') });
      return res.end(JSON.stringify({ language_code: 'eng', language_probability: 0.98, text, words, transcription_id: randomBytes(8).toString('hex') }));
    }
    if (req.method === 'POST' && url.pathname === '/v1/voices/add') {
      const form = await readForm(req);
      seen.form = form;
      if (!form.fields.name || form.files.length === 0) return detail(res, 422, 'invalid_request', 'name and files are required');
      const id = randomBytes(15).toString('base64url').slice(0, 20);
      voices.set(id, { name: form.fields.name[0], samples: form.files.map((f) => f.data) });
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ voice_id: id, requires_verification: false }));
    }
    if (req.method === 'DELETE' && (m = /^\/v1\/voices\/([^/]+)$/.exec(url.pathname))) {
      if (!voices.delete(m[1])) return detail(res, 404, 'voice_not_found', `A voice with voice_id '${m[1]}' was not found.`);
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ status: 'ok' }));
    }
    req.resume();
    detail(res, 404, 'not_found', `no route ${req.method} ${url.pathname} on the stand-in`);
  });
  // WS /v1/text-to-speech/{voice_id}/stream-input (AsyncAPI): text frames in, {audio, isFinal, normalizedAlignment, alignment} out;
  // text with "[error:NAME]" in it (a test control) is answered with ElevenLabs' error message of that name and a 1008 close.
  // WS .../multi-stream-input: multiContext below.
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, headBytes) => {
    const url = new URL(req.url, 'http://x');
    const m = /^\/v1\/text-to-speech\/([^/]+)\/(multi-)?stream-input$/.exec(url.pathname);
    const seen = { path: url.pathname, query: Object.fromEntries(url.searchParams), headers: req.headers, frames: [] };
    requests.push({ method: 'WS', ...seen });
    if (!m || req.headers['xi-api-key'] !== standin.apiKey) { socket.end('HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n'); return; }
    wss.handleUpgrade(req, socket, headBytes, (ws) => {
      sockets.push(seen);
      if (m[2]) return multiContext(ws, seen, url.searchParams.get('output_format') ?? 'mp3_44100_128');
      const format = url.searchParams.get('output_format') ?? 'mp3_44100_128';
      let buffered = '';
      let spoken = 0;
      const speak = (text) => {
        if (text.trim() === '') return;
        const a = audioOf(text, format);
        const chars = [...text];
        const al = { chars, charStartTimesMs: chars.map((_, i) => (spoken + i) * 60), charsDurationsMs: chars.map(() => 60) };
        spoken += chars.length;
        ws.send(JSON.stringify({ audio: a.body.toString('base64'), isFinal: null, normalizedAlignment: al, alignment: al }));
      };
      ws.on('message', (data) => {
        const f = JSON.parse(data.toString('utf8'));
        seen.frames.push(f);
        const e = /\[error:(\w+)\]/.exec(f.text ?? '');
        if (e) return socketError(ws, e[1], `The request failed: ${e[1]}.`);
        if (f.text === '') { speak(buffered); buffered = ''; ws.send(JSON.stringify({ isFinal: true })); ws.close(1000); return; }
        // initializeConnection's text is a single space: it opens the stream and speaks nothing
        if (seen.frames.length > 1) buffered += f.text ?? '';
        if (f.flush === true || f.try_trigger_generation === true) { speak(buffered); buffered = ''; }
      });
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const standin = {
    url: `http://127.0.0.1:${server.address().port}`, requests, voices, sockets,
    /** Errors to answer the next requests with, in turn: `{status, body, headers}` (a test control). */
    failures: [],
    /** The key it takes (a test may change it: the operator's key revoked at ElevenLabs). */
    apiKey,
    async close() { for (const c of wss.clients) c.terminate(); server.closeAllConnections(); await new Promise((r) => server.close(r)); },
  };
  t.after(() => standin.close());
  return standin;
}

/** An error message in ElevenLabs' socket shape (`{message, error, code}`), then the close with that code. */
function socketError(ws, error, message) {
  ws.send(JSON.stringify({ message, error, code: 1008 }));
  ws.close(1008, error);
}

/**
 * WS /v1/text-to-speech/{voice_id}/multi-stream-input (AsyncAPI: InitializeConnectionMulti, InitialiseContext, SendTextMulti,
 * FlushContext, CloseContext, CloseSocket, KeepContextAlive in; AudioOutputMulti, FinalOutputMulti out). Each context buffers its
 * text; `flush` speaks it, one AudioOutputMulti per word (40 ms apart, as a generation streams), every context in turn;
 * `close_context` drops what was not flushed and ends the context with FinalOutputMulti; `close_socket` flushes every context,
 * ends each, then closes 1000. A message naming no context is the default one (its frames carry no contextId).
 * Test control: text with "[error:NAME]" in it is answered with ElevenLabs' error message of that name and a 1008 close.
 */
function multiContext(ws, seen, format) {
  const contexts = new Map();
  const spoken = new Map();
  let queue = Promise.resolve();
  const out = (id, fields) => ws.readyState === 1 && ws.send(JSON.stringify(id === '' ? fields : { ...fields, contextId: id }));
  const speak = (id, text) => {
    queue = queue.then(async () => {
      for (const word of text.split(/(?<= )/)) {
        if (word.trim() === '' || ws.readyState !== 1) continue;
        const a = audioOf(word, format);
        const chars = [...word];
        const at = spoken.get(id) ?? 0;
        const al = { chars, charStartTimesMs: chars.map((_, i) => (at + i) * 60), charsDurationsMs: chars.map(() => 60) };
        spoken.set(id, at + chars.length);
        out(id, { audio: a.body.toString('base64'), normalizedAlignment: al, alignment: al });
        await new Promise((r) => setTimeout(r, 40));
      }
    });
  };
  const flush = (id) => { const c = contexts.get(id); if (c && c.text.trim() !== '') speak(id, c.text); if (c) c.text = ''; };
  const final = (id) => { queue = queue.then(() => out(id, { isFinal: true })); };
  ws.on('message', (data) => {
    const f = JSON.parse(data.toString('utf8'));
    seen.frames.push(f);
    if (f.close_socket === true) {
      for (const id of contexts.keys()) { flush(id); final(id); }
      contexts.clear();
      queue = queue.then(() => ws.close(1000));
      return;
    }
    const id = f.context_id ?? f.contextId ?? '';
    const m = /\[error:(\w+)\]/.exec(f.text ?? '');
    if (m) return socketError(ws, m[1], `The request failed: ${m[1]}.`);
    if (f.close_context === true) { contexts.delete(id); final(id); return; }
    let c = contexts.get(id);
    if (!c) {
      if (contexts.size >= MAX_CONTEXTS) return socketError(ws, 'max_active_conversations', `Maximum simultaneous contexts per WebSocket connection exceeded (${MAX_CONTEXTS}).`);
      c = { text: '' };
      contexts.set(id, c);
    }
    // a context's first text of a single space opens it and speaks nothing
    if (typeof f.text === 'string' && f.text.trim() !== '') c.text += f.text;
    if (f.flush === true) flush(id);
  });
}

// `node test/helpers/elevenlabs-standin.mjs KEY` (the Python suite): prints {"url"} and serves until killed.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const s = await startElevenLabs({ after() {} }, process.argv[2], true);
  console.log(JSON.stringify({ url: s.url }));
}

// `sim`: a deterministic simulated OpenAI-compatible upstream over real HTTP (test infrastructure, not a model): API and routing.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { chatJob, completionBody, textJob } from './completions.js';
import { embeddingsBody } from './embeddings.js';
import { type Faults, faultsOf, numberHeader, sendError, sendJson, sendSimError, SimError } from './http.js';
import { sendStream } from './stream.js';
import { SimVoices, SIM_VOICE_PREFIX } from './voices.js';
import { voiceConversion } from './conversion.js';
import { OPENAI_VOICES } from '../resolve/voices.js';
import { simSpeechFormats, speech } from './speech.js';
import { findFfmpeg, type Ffmpeg } from '../audio/ffmpeg.js';
import type { Codec } from '../audio/index.js';
import { transcribe } from './transcribe.js';
import type { SimTranscriptionOptions } from '../config-transcription.js';
import { attachRealtime } from './realtime.js';

export { countTokens } from './tokens.js';

export interface SimModel { id: string; kind: 'chat' | 'embedding'; reasoning?: boolean; dimensions?: number }
export interface SimOptions {
  host?: string; port?: number; tokenDelayMs?: number; models?: SimModel[];
  /** The transcriber acting like an upstream with less: another model field, fewer formats, no streaming, no word times. */
  transcription?: SimTranscriptionOptions;
  /** The ffmpeg its aac is made with: found at start when not given; null: none (sim then makes no aac). */
  ffmpeg?: Ffmpeg | null;
}
export interface SimHandle {
  url: string; port: number; stats(): SimStats; close(): Promise<void>;
  /** The speech response_formats it makes (aac only with ffmpeg). */
  speechFormats: readonly Codec[];
}
export interface SimStats { requests: number; activeStreams: number; abortedStreams: number; completedStreams: number }

export const DEFAULT_SIM_MODELS: SimModel[] = [
  { id: 'sim-chat', kind: 'chat' },
  { id: 'sim-reasoner', kind: 'chat', reasoning: true },
  { id: 'sim-embed', kind: 'embedding', dimensions: 384 },
];

type Obj = Record<string, unknown>;

/** A fixed `created` for model objects (2026-01-01T00:00:00Z): the listing is precomputed once. */
const MODELS_CREATED = 1_767_225_600;

function modelObject(m: SimModel): Obj {
  return { id: m.id, object: 'model', created: MODELS_CREATED, owned_by: 'tollgate-sim', simulated: true };
}

/**
 * Starts the simulated upstream. Per-request faults come from headers: x-sim-fail-status, x-sim-hang,
 * x-sim-truncate-after, x-sim-malformed, and x-sim-token-delay-ms overrides `tokenDelayMs`.
 */
export async function startSim(opts: SimOptions = {}): Promise<SimHandle> {
  const ffmpeg = opts.ffmpeg === undefined ? await findFfmpeg() : opts.ffmpeg ?? undefined;
  const models = new Map((opts.models ?? DEFAULT_SIM_MODELS).map((m) => [m.id, m]));
  const modelJson = new Map([...models.values()].map((m) => [m.id, JSON.stringify(modelObject(m))]));
  const listJson = JSON.stringify({ object: 'list', data: [...models.values()].map(modelObject) });
  const defaultDelay = Math.max(0, opts.tokenDelayMs ?? 0);
  const stats: SimStats = { requests: 0, activeStreams: 0, abortedStreams: 0, completedStreams: 0 };
  const voices = new SimVoices();

  const route = (method: string, path: string, raw: string, res: http.ServerResponse, faults: Faults): void => {
    if (method === 'GET' && path === '/v1/models') { sendJson(res, listJson, faults); return; }
    if (method === 'GET' && path.startsWith('/v1/models/')) {
      let id: string;
      try { id = decodeURIComponent(path.slice('/v1/models/'.length)); } catch { id = ''; }
      const json = modelJson.get(id);
      if (json === undefined) throw new SimError(404, `The model \`${id}\` does not exist.`, 'model', 'model_not_found');
      sendJson(res, json, faults);
      return;
    }
    if (method === 'POST' && path === '/v1/audio/speech') {
      let b: Obj;
      try { b = JSON.parse(raw) as Obj; } catch { throw new SimError(400, 'We could not parse the JSON body of your request.'); }
      // A sim voice id this sim did not clone is unknown here (another sim's copy of a voice has its own id).
      if (typeof b.voice === 'string' && b.voice.startsWith(SIM_VOICE_PREFIX) && !voices.has(b.voice)) throw new SimError(404, `No voice "${b.voice}".`, 'voice', 'voice_not_found');
      speech(b, res, faults, ffmpeg);
      return;
    }
    const kind = method !== 'POST' ? undefined
      : path === '/v1/chat/completions' ? 'chat' : path === '/v1/completions' ? 'text' : path === '/v1/embeddings' ? 'embedding' : undefined;
    if (!kind) throw new SimError(404, `Invalid URL (${method} ${path})`);
    let body: Obj;
    try { body = JSON.parse(raw) as Obj; } catch { throw new SimError(400, 'We could not parse the JSON body of your request.'); }
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new SimError(400, 'The request body must be a JSON object.');
    if (typeof body.model !== 'string' || body.model === '') throw new SimError(400, "'model' is required.", 'model');
    const model = models.get(body.model);
    if (!model) throw new SimError(404, `The model \`${body.model}\` does not exist.`, 'model', 'model_not_found');
    if (kind === 'embedding') {
      if (model.kind !== 'embedding') throw new SimError(400, `\`${model.id}\` is a chat model and cannot make embeddings.`, 'model');
      sendJson(res, embeddingsBody(model, body), faults);
      return;
    }
    if (model.kind !== 'chat') throw new SimError(400, `\`${model.id}\` is an embedding model and cannot make completions.`, 'model');
    const job = kind === 'chat' ? chatJob(model, body) : textJob(model, body);
    if (job.stream) { sendStream(job, res, faults, stats); return; }
    const text = completionBody(job);
    const wait = faults.delayMs * job.usage.completion_tokens; // a whole answer takes as long as its tokens would
    if (wait <= 0) { sendJson(res, text, faults); return; }
    const timer = setTimeout(() => sendJson(res, text, faults), wait);
    res.on('close', () => clearTimeout(timer));
  };

  const handle = (req: http.IncomingMessage, res: http.ServerResponse, path: string, raw: string): void => {
    const fail = numberHeader(req, 'x-sim-fail-status');
    if (fail !== null && fail >= 400 && fail <= 599) {
      sendError(res, Math.floor(fail), `Simulated failure (x-sim-fail-status: ${Math.floor(fail)}).`, null, fail === 429 ? 'rate_limit_exceeded' : null);
      return;
    }
    if (req.headers['x-sim-hang'] === '1') return; // never answer: the socket stays open until the client leaves
    try {
      route(req.method ?? 'GET', path, raw, res, faultsOf(req, defaultDelay));
    } catch (e) {
      if (e instanceof SimError) sendSimError(res, e);
      else if (!res.headersSent) sendError(res, 500, `The simulated upstream failed: ${(e as Error).message}`);
      else res.destroy();
    }
  };

  const server = http.createServer({ keepAlive: true, noDelay: true }, (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (path === '/health') { res.writeHead(200, { 'content-type': 'text/plain' }).end('ok'); return; }
    if (path === '/sim/stats') { res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(stats)); return; }
    stats.requests++;
    // Binary (multipart) routes read their own bodies; the rest are JSON text.
    if (path.startsWith('/v1/audio/voices') || path === '/v1/audio/voice-conversion') {
      const fail = numberHeader(req, 'x-sim-fail-status');
      if (fail !== null && fail >= 400 && fail <= 599) { req.resume(); sendError(res, Math.floor(fail), `Simulated failure (x-sim-fail-status: ${Math.floor(fail)}).`); return; }
      if (path === '/v1/audio/voice-conversion' && req.method === 'POST') { void voiceConversion(req, res, (v) => voices.has(v) || OPENAI_VOICES.includes(v)); return; }
      if (voices.route(req, res, path)) return;
    }
    // Multipart audio routes read their own (binary) bodies.
    if (req.method === 'POST' && (path === '/v1/audio/transcriptions' || path === '/v1/audio/translations')) {
      const fail = numberHeader(req, 'x-sim-fail-status');
      if (fail !== null && fail >= 400 && fail <= 599) { req.resume(); sendError(res, Math.floor(fail), `Simulated failure (x-sim-fail-status: ${Math.floor(fail)}).`); return; }
      transcribe(req, res, path.endsWith('translations') ? 'translate' : 'transcribe', opts.transcription ?? {}).catch((e: unknown) => {
        if (!res.headersSent) sendError(res, 500, `The simulated upstream failed: ${(e as Error).message}`); else res.destroy();
      });
      return;
    }
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => { raw += c; });
    req.on('end', () => handle(req, res, path, raw));
  });
  // WS /v1/realtime: the realtime protocol for text turns (a pass-through upstream).
  const realtime = attachRealtime(server, models, defaultDelay);
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    // A deep accept queue, as model servers have (uvicorn: 2048): Node's default of 511 overflows when
    // thousands of streams open at once, and the kernel then resets or delays the connections it drops.
    server.listen({ port: opts.port ?? 0, host: opts.host ?? '127.0.0.1', backlog: 4096 }, () => {
      server.off('error', reject);
      const port = (server.address() as AddressInfo).port;
      // Each sim gives its own ids (two sims cloning one voice give two ids, as two hosts would).
      voices.salt = String(port);
      const host = !opts.host || opts.host === '0.0.0.0' || opts.host === '::' ? '127.0.0.1' : opts.host;
      resolve({
        url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
        port,
        stats: () => ({ ...stats }),
        speechFormats: simSpeechFormats(ffmpeg),
        close: () => new Promise<void>((done) => { realtime.close(); server.close(() => done()); server.closeAllConnections(); }),
      });
    });
  });
}

// sim's side of the voice-cloning contract (docs/upstreams.md): cloned voices kept in memory, ids derived from their samples.
import type http from 'node:http';
import { createHash } from 'node:crypto';
import busboy from 'busboy';
import { sendError } from './http.js';

/** How every id this sim gives a voice starts. */
export const SIM_VOICE_PREFIX = 'simvoice_';

/** A voice the sim has cloned: its name and the samples' digest (what makes its id). */
export interface SimVoice { id: string; name: string; model: string; samples: number }

/** The voices cloned on this sim, by id (a module-level map: one sim per process in tests, and deterministic ids). */
export class SimVoices {
  private readonly voices = new Map<string, SimVoice>();
  /** Mixed into every id (the sim's port): one sim's ids are its own. */
  salt = '';

  has(id: string): boolean { return this.voices.has(id); }

  /** Serves `/v1/audio/voices[/{id}]` (a GET of the list: the ids, for tests); false when the path is not one of them. */
  route(req: http.IncomingMessage, res: http.ServerResponse, path: string): boolean {
    if (path === '/v1/audio/voices' && req.method === 'POST') { this.add(req, res); return true; }
    if (path === '/v1/audio/voices' && req.method === 'GET') { req.resume(); json(res, 200, { voices: [...this.voices.keys()] }); return true; }
    if (path.startsWith('/v1/audio/voices/')) {
      let id = '';
      try { id = decodeURIComponent(path.slice('/v1/audio/voices/'.length)); } catch { /* an id that cannot be decoded is none we made */ }
      req.resume();
      const v = this.voices.get(id);
      if (!v) { sendError(res, 404, `No voice "${id}".`, 'voice_id', 'voice_not_found'); return true; }
      if (req.method === 'DELETE') { this.voices.delete(id); json(res, 200, { voice_id: id, deleted: true }); return true; }
      if (req.method === 'GET') { json(res, 200, { voice_id: v.id, name: v.name, model: v.model, samples: v.samples }); return true; }
      sendError(res, 405, `${req.method} is not allowed on ${path}.`);
      return true;
    }
    return false;
  }

  private add(req: http.IncomingMessage, res: http.ServerResponse): void {
    let bb: busboy.Busboy;
    try {
      bb = busboy({ headers: req.headers, limits: { fileSize: 64 * 1024 * 1024, files: 64 } });
    } catch {
      req.resume();
      sendError(res, 400, 'The body must be multipart/form-data.');
      return;
    }
    const fields = new Map<string, string>();
    const digest = createHash('sha256');
    let samples = 0;
    let empty = false;
    bb.on('field', (name, value) => fields.set(name, value));
    bb.on('file', (field, file) => {
      if (field !== 'files') { file.resume(); return; }
      samples++;
      let size = 0;
      file.on('data', (c: Buffer) => { size += c.length; digest.update(c); });
      file.on('end', () => { if (size === 0) empty = true; digest.update('\0'); });
    });
    bb.on('error', () => { if (!res.headersSent) sendError(res, 400, 'The multipart body could not be read.'); });
    bb.on('close', () => {
      if (res.headersSent) return;
      const name = fields.get('name');
      const model = fields.get('model') ?? '';
      if (!name) { sendError(res, 400, "'name' is required.", 'name'); return; }
      if (samples === 0) { sendError(res, 400, "At least one sample is required in 'files'.", 'files'); return; }
      if (empty) { sendError(res, 400, 'A sample is empty.', 'files'); return; }
      digest.update(`${name}\0${model}\0${this.salt}`);
      const id = `${SIM_VOICE_PREFIX}${digest.digest('hex').slice(0, 20)}`;
      this.voices.set(id, { id, name, model, samples });
      json(res, 200, { voice_id: id });
    });
    req.pipe(bb);
  }
}

function json(res: http.ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
}

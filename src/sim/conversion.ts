// sim's side of the conversion contract (docs/upstreams.md): speech in, the same length of speech out in the target voice, as 24 kHz PCM.
import type http from 'node:http';
import { createHash } from 'node:crypto';
import busboy from 'busboy';
import { measureAudio } from '../meter/audio.js';
import { findFfmpeg, type Ffmpeg } from '../audio/ffmpeg.js';
import { sendError } from './http.js';
import { voiceSettingsAsked } from './speech.js';

export const SIM_PCM_RATE = 24_000;

let ffmpeg: Promise<Ffmpeg | undefined> | undefined;
/** The ffmpeg sim decodes with (found once), as a real host has its decoder. */
export function simFfmpeg(): Promise<Ffmpeg | undefined> {
  ffmpeg ??= findFfmpeg();
  return ffmpeg;
}

interface Form { fields: Map<string, string>; file: Buffer | null; mime: string }

function readForm(req: http.IncomingMessage): Promise<Form> {
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try { bb = busboy({ headers: req.headers, limits: { fileSize: 64 * 1024 * 1024, files: 1 } }); } catch (e) { reject(e as Error); return; }
    const form: Form = { fields: new Map(), file: null, mime: '' };
    bb.on('field', (n, v) => form.fields.set(n, v));
    bb.on('file', (n, f, info) => {
      const parts: Buffer[] = [];
      f.on('data', (c: Buffer) => parts.push(c));
      f.on('end', () => { if (n === 'file') { form.file = Buffer.concat(parts); form.mime = info.mimeType; } });
    });
    bb.on('error', reject);
    bb.on('close', () => resolve(form));
    req.pipe(bb);
  });
}

/**
 * The converted speech: as long as the input (its frames counted or decoded, as Tollgate measures it; or raw 16 kHz PCM), a
 * voiced tone whose pitch is the target voice's (deterministic per voice), streamed in 100 ms pieces.
 * Preset voice names are wired in with the preset table; until then only cloned voices convert.
 */
export async function voiceConversion(req: http.IncomingMessage, res: http.ServerResponse, knownVoice: (v: string) => boolean): Promise<void> {
  let form: Form;
  try { form = await readForm(req); } catch { sendError(res, 400, 'The multipart body could not be read.'); return; }
  const voice = form.fields.get('voice') ?? '';
  if (!form.file || form.file.length === 0) { sendError(res, 400, "'file' is required.", 'file'); return; }
  if (!voice || !knownVoice(voice)) { sendError(res, 404, `No voice "${voice.slice(0, 64)}".`, 'voice', 'voice_not_found'); return; }
  const settings = form.fields.get('voice_settings');
  let asked: boolean;
  try { asked = settings !== undefined && voiceSettingsAsked(JSON.parse(settings)); } catch { asked = true; }
  if (asked) { sendError(res, 400, 'sim\'s conversion does not change with voice_settings: only the premade defaults are taken.', 'voice_settings'); return; }
  const format = form.fields.get('response_format') ?? 'pcm';
  if (format !== 'pcm') { sendError(res, 400, 'This host converts to response_format pcm only.', 'response_format'); return; }
  let seconds: number;
  if (form.fields.get('input_format') === 'pcm_s16le_16') seconds = form.file.length / 32_000;
  else {
    // as a decoder gets it (frames counted, else decoded), not as a header declares it
    try { seconds = (await measureAudio(form.file, { ffmpeg: await simFfmpeg() })).durationMs / 1000; } catch { seconds = NaN; }
    if (!Number.isFinite(seconds) || seconds <= 0) { sendError(res, 400, 'The audio file could not be decoded.', 'file'); return; }
  }
  const total = Math.round(seconds * SIM_PCM_RATE);
  const pitch = 90 + (createHash('sha256').update(voice).digest()[0]! % 120); // 90–209 Hz: a speaking voice's range
  res.writeHead(200, { 'content-type': 'audio/pcm', 'content-length': String(total * 2) });
  const piece = SIM_PCM_RATE / 10;
  for (let at = 0; at < total && !res.destroyed; at += piece) {
    const n = Math.min(piece, total - at);
    const buf = Buffer.alloc(n * 2);
    for (let i = 0; i < n; i++) {
      const t = (at + i) / SIM_PCM_RATE;
      buf.writeInt16LE(Math.round(6000 * Math.sin(2 * Math.PI * pitch * t) + 2000 * Math.sin(4 * Math.PI * pitch * t)), i * 2);
    }
    if (!res.write(buf)) await new Promise((r) => res.once('drain', r));
  }
  res.end();
}

// sim's POST /v1/audio/transcriptions and /v1/audio/translations (the OpenAI-compatible contract, multipart):
// deterministic transcripts; audio sim synthesized gives back its text (speech.ts), timed over the audio's duration.
import type http from 'node:http';
import busboy from 'busboy';
import { parseBuffer } from 'music-metadata';
import { measureAudio } from '../meter/audio.js';
import { simFfmpeg } from './conversion.js';
import { int16, parseWav } from '../audio/pcm.js';
import { extractText, SIM_TEXT_TAG } from './speech.js';
import { sendError } from './http.js';
import type { SimTranscriptionOptions } from '../config-transcription.js';

interface Form { fields: Map<string, string[]>; file: Buffer | null }

function readForm(req: http.IncomingMessage): Promise<Form> {
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try { bb = busboy({ headers: req.headers, limits: { fileSize: 64 * 1024 * 1024 } }); } catch (e) { reject(e as Error); return; }
    const form: Form = { fields: new Map(), file: null };
    bb.on('field', (n, v) => form.fields.set(n, [...(form.fields.get(n) ?? []), v]));
    bb.on('file', (n, f) => {
      const parts: Buffer[] = [];
      f.on('data', (c: Buffer) => parts.push(c));
      f.on('end', () => { if (n === 'file') form.file = Buffer.concat(parts); });
    });
    bb.on('error', reject);
    bb.on('close', () => resolve(form));
    req.pipe(bb);
  });
}

export interface Heard { text: string; durationSecs: number }

/**
 * What sim hears in a file: the text sim's own speech carries (LSBs of WAV PCM, else a tag), over the
 * file's duration; any other audio gets a fixed sentence naming its duration. Unreadable: undefined.
 */
export async function hear(file: Buffer): Promise<Heard | undefined> {
  const w = parseWav(file);
  if (w && w.format === 1 && w.bitsPerSample === 16 && w.channels === 1) {
    const samples = int16(w.data);
    const durationSecs = samples.length / w.sampleRate;
    const text = extractText(samples);
    if (durationSecs > 0) return { text: text ?? fallback(durationSecs), durationSecs };
  }
  // the length a decoder gets (frames counted, else decoded), as a real host hears it; the tags only for the text
  let durationSecs: number;
  try { durationSecs = (await measureAudio(file, { ffmpeg: await simFfmpeg() })).durationMs / 1000; } catch { return undefined; }
  const meta = await parseBuffer(file, { size: file.length }, { skipCovers: true }).catch(() => undefined);
  let text: string | undefined;
  for (const tags of Object.values(meta?.native ?? {})) {
    for (const t of tags) {
      if (t.id === `TXXX:${SIM_TEXT_TAG}` || t.id === SIM_TEXT_TAG.toUpperCase()) text = String(t.value);
    }
  }
  return { text: text ?? fallback(durationSecs), durationSecs };
}

function fallback(secs: number): string {
  return `This is sim, the simulated transcriber, hearing ${secs.toFixed(2)} seconds of audio.`;
}

const round = (x: number) => Math.round(x * 1000) / 1000;

interface Word { word: string; start: number; end: number }
interface Segment { text: string; start: number; end: number }

/** Words and sentences, each character given an equal share of the audio (sim speaks them evenly). */
export function timings(text: string, durationSecs: number): { words: Word[]; segments: Segment[] } {
  const chars = [...text];
  const per = chars.length === 0 ? 0 : durationSecs / chars.length;
  const words: Word[] = [];
  const segments: Segment[] = [];
  let i = 0;
  let segStart = -1;
  let segText = '';
  const closeSeg = (end: number) => {
    if (segText.trim() !== '') segments.push({ text: segText.trim(), start: round(segStart * per), end: round(end * per) });
    segText = ''; segStart = -1;
  };
  while (i < chars.length) {
    if (chars[i]!.trim() === '') { segText += chars[i]; i++; continue; }
    let j = i;
    while (j < chars.length && chars[j]!.trim() !== '') j++;
    const w = chars.slice(i, j).join('');
    words.push({ word: w.replace(/^[^\p{L}\p{N}]+|[^\p{L}\p{N}]+$/gu, '') || w, start: round(i * per), end: round(j * per) });
    if (segStart < 0) segStart = i;
    segText += w;
    if (/[.!?]$/.test(w)) closeSeg(j);
    i = j;
  }
  if (segStart >= 0) closeSeg(chars.length);
  return { words, segments };
}

const LANGUAGES: Record<string, string> = { en: 'english', de: 'german', fr: 'french', es: 'spanish', it: 'italian', ja: 'japanese', zh: 'chinese', pt: 'portuguese', nl: 'dutch' };

function clock(secs: number, sep: string): string {
  const ms = Math.round(secs * 1000);
  const h = Math.floor(ms / 3_600_000); const m = Math.floor(ms / 60_000) % 60; const s = Math.floor(ms / 1000) % 60;
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${p(h)}:${p(m)}:${p(s)}${sep}${p(ms % 1000, 3)}`;
}

const FORMATS = ['json', 'text', 'srt', 'verbose_json', 'vtt'];

/**
 * `like` makes sim act like an upstream with less (faster-whisper-server 0.0.3: the model in `model_name`, json
 * and verbose_json only, no streaming, segments without word times): what it lacks is refused or ignored as there.
 */
export async function transcribe(req: http.IncomingMessage, res: http.ServerResponse, task: 'transcribe' | 'translate', like: SimTranscriptionOptions = {}): Promise<void> {
  let form: Form;
  try { form = await readForm(req); } catch { sendError(res, 400, 'The multipart body could not be read.'); return; }
  const field = (n: string) => form.fields.get(n)?.[0];
  if (!form.file || form.file.length === 0) { sendError(res, 400, "'file' is required.", 'file'); return; }
  const modelField = like.modelField ?? 'model';
  if (!field(modelField)) { sendError(res, 400, `'${modelField}' is required.`, modelField); return; }
  const format = field('response_format') ?? 'json';
  const formats: readonly string[] = like.formats ?? FORMATS;
  if (!formats.includes(format)) { sendError(res, 400, `Unsupported response_format: ${format}`, 'response_format'); return; }
  const heard = await hear(form.file);
  if (!heard) { sendError(res, 400, 'The audio file could not be decoded or its format is not supported.', 'file'); return; }
  const { text, durationSecs } = heard;
  const lang = task === 'translate' ? 'en' : (field('language') ?? 'en');
  const { words, segments } = timings(text, durationSecs);
  const seconds = round(durationSecs);

  if (task === 'transcribe' && like.stream !== false && field('stream') === 'true' && format !== 'verbose_json' && format !== 'srt' && format !== 'vtt') {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    words.forEach((w, k) => res.write(`data: ${JSON.stringify({ type: 'transcript.text.delta', delta: (k > 0 ? ' ' : '') + w.word })}\n\n`));
    const tokens = Math.ceil([...text].length / 4);
    res.end(`data: ${JSON.stringify({ type: 'transcript.text.done', text, usage: { type: 'tokens', input_tokens: Math.ceil(durationSecs * 10), output_tokens: tokens, total_tokens: Math.ceil(durationSecs * 10) + tokens } })}\n\n`);
    return;
  }
  const grains = form.fields.get('timestamp_granularities[]') ?? form.fields.get('timestamp_granularities') ?? ['segment'];
  // Whisper's subtitle writers never let a cue's text hold the `-->` that ends a timing line.
  const cue = (t: string) => t.replace(/-->/g, '->');
  const segs = segments.map((s, id) => ({ id, seek: 0, start: s.start, end: s.end, text: ` ${s.text}`, tokens: [], temperature: 0, avg_logprob: -0.1, compression_ratio: 1, no_speech_prob: 0 }));
  switch (format) {
    case 'text': res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(`${text}\n`); return;
    case 'srt': res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' })
      .end(segments.map((s, k) => `${k + 1}\n${clock(s.start, ',')} --> ${clock(s.end, ',')}\n${cue(s.text)}\n\n`).join('')); return;
    case 'vtt': res.writeHead(200, { 'content-type': 'text/vtt; charset=utf-8' })
      .end(`WEBVTT\n\n${segments.map((s) => `${clock(s.start, '.')} --> ${clock(s.end, '.')}\n${cue(s.text)}\n\n`).join('')}`); return;
    case 'verbose_json': {
      const body: Record<string, unknown> = { task, language: LANGUAGES[lang] ?? lang, duration: seconds, text };
      if (grains.includes('word') && like.words !== false) body.words = words;
      if (grains.includes('segment') || task === 'translate') body.segments = segs;
      if (task === 'transcribe') body.usage = { type: 'duration', seconds: Math.ceil(durationSecs) };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body)); return;
    }
    default:
      res.writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify(task === 'transcribe' ? { text, usage: { type: 'duration', seconds: Math.ceil(durationSecs) } } : { text }));
  }
}

// sim's POST /v1/audio/speech (the OpenAI-compatible contract): deterministic 24 kHz speech, 60 ms a character, in every
// response_format (mp3 opus aac flac wav pcm), raw or as SSE speech.audio.delta/done events, streamed as produced.
//
// The text rides in the audio so that transcribing it gives it back (docs/upstreams.md, "sim's round trip"):
// the PCM's least significant bits carry it (pcm, wav, flac keep every bit), and the containers that have tags
// carry it as a tag too (mp3 and aac: ID3v2 TXXX; flac and opus: a Vorbis comment) — lossy codecs lose LSBs.
// opus is real (libopus); aac is real too, made by ffmpeg (src/audio has no AAC encoder) with the ID3v2 tag in
// front: a sim without ffmpeg does not make aac at all (400), and says so (`simSpeechFormats`; docs/upstreams.md).
import type http from 'node:http';
import { audioEncoder, CONTENT_TYPES, id3v2, type AudioEncoder, type Codec } from '../audio/index.js';
import { encodeWith, type Ffmpeg } from '../audio/ffmpeg.js';
import { SimError, type Faults } from './http.js';

/** What sim's speech lasts: 60 ms per character at speed 1 (so timings are a function of the text). */
export const SIM_MS_PER_CHAR = 60;
export const SIM_SPEECH_RATE = 24_000;
/** The tag key that carries the text in containers with tags. */
export const SIM_TEXT_TAG = 'tollgate_sim_text';
const MAGIC = Buffer.from('TGT1', 'latin1');

/** The response_formats sim makes: aac only with ffmpeg (it has no encoder of its own for it). */
export function simSpeechFormats(ffmpeg: Ffmpeg | undefined): readonly Codec[] {
  return ffmpeg?.formats.includes('aac') ? ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] : ['mp3', 'opus', 'flac', 'wav', 'pcm'];
}

/** Samples per character at this speed. */
function perChar(speed: number): number {
  return Math.round(((SIM_MS_PER_CHAR / speed) * SIM_SPEECH_RATE) / 1000);
}

/** One character's 60 ms: a tone whose pitch follows the character and the voice, faded in and out (silence for spaces). */
export function synth(text: string, speed = 1, voice = ''): Int16Array {
  const chars = [...text];
  const per = perChar(speed);
  // The voice moves every pitch by 0–96.99 Hz in hundredths: two voices sound alike one time in 9,700 (whole
  // hertz, one in 97, made a test that a cloned voice is not a preset fail about once a hundred runs).
  let shift = 0;
  for (const c of voice) shift = (shift * 31 + c.charCodeAt(0)) % 9700;
  const out = new Int16Array(chars.length * per);
  chars.forEach((ch, i) => {
    if (ch.trim() === '') return;
    const f = 180 + shift / 100 + (ch.codePointAt(0)! % 64) * 12;
    for (let n = 0; n < per; n++) {
      const env = Math.min(1, n / 240, (per - n) / 240);
      out[i * per + n] = Math.round(Math.sin((2 * Math.PI * f * n) / SIM_SPEECH_RATE) * 9000 * env);
    }
  });
  embedText(out, text);
  return out;
}

/** Writes `TGT1`, a 32-bit length and the UTF-8 text into the samples' least significant bits (as far as they reach). */
export function embedText(samples: Int16Array, text: string): void {
  const utf8 = Buffer.from(text, 'utf8');
  const len = Buffer.alloc(4); len.writeUInt32BE(utf8.length);
  const payload = Buffer.concat([MAGIC, len, utf8]);
  const bits = Math.min(payload.length * 8, samples.length);
  for (let i = 0; i < bits; i++) {
    const bit = (payload[i >> 3]! >> (7 - (i & 7))) & 1;
    samples[i] = (samples[i]! & ~1) | bit;
  }
}

/** The text `embedText` wrote, or undefined when these samples carry none. */
export function extractText(samples: Int16Array): string | undefined {
  const byte = (k: number): number => {
    let v = 0;
    for (let b = 0; b < 8; b++) v = (v << 1) | (samples[k * 8 + b]! & 1);
    return v;
  };
  if (samples.length < 64) return undefined;
  for (let k = 0; k < 4; k++) if (byte(k) !== MAGIC[k]) return undefined;
  const len = ((byte(4) << 24) | (byte(5) << 16) | (byte(6) << 8) | byte(7)) >>> 0;
  if ((8 + len) * 8 > samples.length) return undefined;
  const out = Buffer.alloc(len);
  for (let k = 0; k < len; k++) out[k] = byte(8 + k);
  return out.toString('utf8');
}

/**
 * The speech parameters sim takes besides its text (a model's `speech_params`): checked, then honoured as far
 * as a tone per character can: its audio is a function of the text, voice and speed alone, so any `seed`
 * gives the same audio every time, and the language and the surrounding texts change nothing.
 */
function checkSpeechParams(body: Record<string, unknown>): void {
  const seed = body.seed;
  if (seed !== undefined && seed !== null && !(Number.isInteger(seed) && (seed as number) >= 0 && (seed as number) <= 4_294_967_295)) {
    throw new SimError(400, 'seed must be an integer from 0 to 4294967295.', 'seed');
  }
  for (const f of ['language_code', 'previous_text', 'next_text']) {
    if (body[f] !== undefined && body[f] !== null && typeof body[f] !== 'string') throw new SimError(400, `${f} must be a string.`, f);
  }
  // What it cannot do it refuses, as an honest upstream would, rather than ignore.
  const asked = (f: string, none: unknown): boolean => body[f] !== undefined && body[f] !== null && body[f] !== none
    && !(Array.isArray(body[f]) && (body[f] as unknown[]).length === 0);
  if (asked('apply_text_normalization', 'auto')) throw new SimError(400, 'sim does not normalize text: apply_text_normalization must be "auto".', 'apply_text_normalization');
  if (asked('apply_language_text_normalization', false)) throw new SimError(400, 'sim does not normalize text.', 'apply_language_text_normalization');
  for (const f of ['previous_request_ids', 'next_request_ids']) if (asked(f, undefined)) throw new SimError(400, `sim keeps no earlier requests: ${f} is not taken.`, f);
  if (asked('enable_ssml_parsing', false)) throw new SimError(400, 'sim does not parse SSML: enable_ssml_parsing must be false.', 'enable_ssml_parsing');
  if (voiceSettingsAsked(body.voice_settings)) throw new SimError(400, 'sim\'s voice does not change with voice_settings: only the premade defaults are taken.', 'voice_settings');
}

/** ElevenLabs' premade defaults (stability 0.5, similarity_boost 0.75, style 0, use_speaker_boost true) ask for nothing; anything else sim cannot do. */
export function voiceSettingsAsked(v: unknown): boolean {
  if (v === undefined || v === null) return false;
  if (typeof v !== 'object' || Array.isArray(v)) return true;
  const defaults: Record<string, unknown> = { stability: 0.5, similarity_boost: 0.75, style: 0, use_speaker_boost: true, speed: 1 };
  return Object.entries(v as Record<string, unknown>).some(([k, x]) => x !== null && x !== undefined && x !== defaults[k]);
}

/** Pieces of 250 ms of audio, written one by one (a slow reader holds the rest back). */
const PIECE = SIM_SPEECH_RATE / 4;

export function speech(body: Record<string, unknown>, res: http.ServerResponse, faults?: Faults, ffmpeg?: Ffmpeg): void {
  const formats = simSpeechFormats(ffmpeg);
  const input = body.input;
  if (typeof input !== 'string' || input === '') throw new SimError(400, "'input' is required.", 'input');
  if (typeof body.voice !== 'string' || body.voice === '') throw new SimError(400, "'voice' is required.", 'voice');
  const format = (body.response_format ?? 'mp3') as Codec;
  if (!formats.includes(format)) {
    const why = format === 'aac' ? ' (this sim makes aac with ffmpeg, which it did not find)' : '';
    throw new SimError(400, `response_format must be one of ${formats.join(', ')}${why}.`, 'response_format');
  }
  if (body.stream_format !== undefined && body.stream_format !== 'sse' && body.stream_format !== 'audio') throw new SimError(400, "stream_format must be 'audio' or 'sse'.", 'stream_format');
  const speed = body.speed === undefined ? 1 : body.speed;
  if (typeof speed !== 'number' || !(speed >= 0.25 && speed <= 4)) throw new SimError(400, 'speed must be a number from 0.25 to 4.', 'speed');
  checkSpeechParams(body);
  const samples = synth(input, speed, body.voice);
  const pcm = Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
  const tags = { [SIM_TEXT_TAG]: input };
  const sse = body.stream_format === 'sse';
  if (format !== 'aac') {
    const pieces: Buffer[] = [];
    for (let i = 0; i < pcm.length; i += PIECE * 2) pieces.push(pcm.subarray(i, i + PIECE * 2));
    send(res, format, sse, input, audioEncoder(format, { inRate: SIM_SPEECH_RATE, totalSamples: samples.length, tags }), pieces, faults);
    return;
  }
  // aac: ffmpeg encodes the whole speech, then it goes out in as many pieces as the PCM would have
  const pass: AudioEncoder = { push: (c) => c, end: () => Buffer.alloc(0) };
  encodeWith(ffmpeg!, pcm, SIM_SPEECH_RATE, 'aac').then((aac) => {
    const file = Buffer.concat([id3v2(tags), aac]);
    const n = Math.max(1, Math.ceil(pcm.length / (PIECE * 2)));
    const size = Math.ceil(file.length / n);
    const pieces: Buffer[] = [];
    for (let i = 0; i < file.length; i += size) pieces.push(file.subarray(i, i + size));
    send(res, format, sse, input, pass, pieces, faults);
  }, (e: unknown) => { res.destroy(e instanceof Error ? e : new Error(String(e))); });
}

/** Writes the pieces through the encoder, as raw audio or SSE events, one by one (a slow reader holds the rest back). */
function send(res: http.ServerResponse, format: Codec, sse: boolean, input: string, enc: AudioEncoder, pieces: Buffer[], faults?: Faults): void {
  let sent = 0;
  const emit = (audio: Buffer): boolean => {
    if (audio.length === 0) return true;
    if (!sse) return res.write(audio);
    return res.write(`data: ${JSON.stringify({ type: 'speech.audio.delta', audio: audio.toString('base64') })}\n\n`);
  };
  res.writeHead(200, { 'content-type': sse ? 'text/event-stream' : CONTENT_TYPES[format] });
  const next = (): void => {
    if (res.destroyed) return;
    while (sent < pieces.length) {
      // After what was written has gone out: Node 22 drops a response's still-corked writes when it is destroyed in the same tick.
      if (faults?.truncateAfter != null && sent >= faults.truncateAfter) { setImmediate(() => res.destroy()); return; }
      const ok = emit(enc.push(pieces[sent++]!));
      if (!ok) { res.once('drain', next); return; }
      if (faults && faults.delayMs > 0) { setTimeout(next, faults.delayMs); return; }
    }
    emit(enc.end());
    if (sse) {
      const tokens = Math.ceil([...input].length / 4);
      res.write(`data: ${JSON.stringify({ type: 'speech.audio.done', usage: { input_tokens: tokens, output_tokens: 0, total_tokens: tokens } })}\n\n`);
    }
    res.end();
  };
  next();
}

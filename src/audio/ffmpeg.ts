// Debian's ffmpeg as a converter for the speech formats src/audio cannot make (aac): found once at start-up, then one child process per reply, fed by stdin and read by stdout.
import { spawn, type ChildProcess } from 'node:child_process';
import { Readable } from 'node:stream';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SpeechFormat } from '../config.js';

/** The encoder ffmpeg uses for each format, in order of preference (the first it has). */
const ENCODERS: Readonly<Record<SpeechFormat, readonly string[]>> = {
  aac: ['aac', 'libfdk_aac'], mp3: ['libmp3lame', 'libshine'], opus: ['libopus'], flac: ['flac'], wav: ['pcm_s16le'], pcm: ['pcm_s16le'],
};
/** The muxer of each format (the demuxer too, when it is the input). */
const MUXERS: Readonly<Record<SpeechFormat, string>> = { aac: 'adts', mp3: 'mp3', opus: 'ogg', flac: 'flac', wav: 'wav', pcm: 's16le' };
/** The rate decoded audio is counted at (any rate would do: every sample is counted). */
const COUNT_RATE = 48_000;
/** A decode that takes longer than this is given up (the file is refused): 25 MiB of audio decodes in seconds. */
const DECODE_TIMEOUT_MS = 120_000;
/** What ffmpeg may write to stderr per conversion, for the log. */
const STDERR_LIMIT = 4096;

/** A conversion's output as the relay reads an upstream reply: a stream, and whether it ended whole. */
export interface ConvertedReply extends Readable { readonly complete: boolean }

/** The part of an upstream reply a conversion reads. */
export interface SourceReply extends Readable { readonly complete: boolean }

export interface Conversion {
  /** The upstream's format, and the rate of its samples when it is raw `pcm`. */
  from: SpeechFormat; fromRate: number;
  /** The client's format, at this rate (mono). */
  to: SpeechFormat; toRate: number;
}

export class Ffmpeg {
  constructor(readonly bin: string, private readonly encoders: ReadonlySet<string>) {}

  /** The formats it can make (its build has an encoder for). */
  get formats(): SpeechFormat[] {
    return (Object.keys(ENCODERS) as SpeechFormat[]).filter((f) => this.encoder(f) !== undefined);
  }

  /**
   * Decodes a whole file and counts its samples (the first audio stream, at 48 kHz mono, with the
   * volumedetect filter's count): the length a decoder really gets, whatever any header says. From a
   * temporary file, as MP4 may keep its index at the end. Undefined when ffmpeg decodes no audio from it.
   */
  async decodedLength(data: Buffer): Promise<{ seconds: number; container: string } | undefined> {
    const dir = await mkdtemp(join(tmpdir(), 'tollgate-measure-'));
    try {
      const file = join(dir, 'audio');
      await writeFile(file, data);
      const args = ['-hide_banner', '-nostdin', '-nostats', '-i', file, '-vn', '-sn', '-dn',
        '-af', `aformat=sample_fmts=s16:sample_rates=${COUNT_RATE}:channel_layouts=mono,volumedetect`, '-f', 'null', '-'];
      const err = await new Promise<string>((resolve) => {
        let text = '';
        const child = spawn(this.bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
        const timer = setTimeout(() => child.kill('SIGKILL'), DECODE_TIMEOUT_MS);
        child.stderr?.on('data', (d: Buffer) => { text += d.toString('utf8'); if (text.length > 65_536) text = text.slice(-16_384); });
        child.once('error', () => { clearTimeout(timer); resolve(''); });
        child.once('close', () => { clearTimeout(timer); resolve(text); });
      });
      const n = /n_samples: (\d+)/.exec(err);
      if (!n || Number(n[1]) === 0) return undefined;
      const container = /Input #0, ([^ ]+), from/.exec(err)?.[1]?.replace(/,$/, '') ?? 'unknown';
      return { seconds: Number(n[1]) / COUNT_RATE, container };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  private encoder(f: SpeechFormat): string | undefined {
    return ENCODERS[f].find((e) => this.encoders.has(e));
  }

  /**
   * Pipes `source` through a new ffmpeg into the returned stream. The stream ends `complete` only
   * when the source ended whole and ffmpeg exited 0; destroying it (the client left) kills ffmpeg and
   * destroys the source; a source that breaks kills ffmpeg too.
   */
  convert(source: SourceReply, c: Conversion, onFailure: (detail: string) => void): ConvertedReply {
    const encoder = this.encoder(c.to);
    if (!encoder) throw new Error(`ffmpeg has no encoder for ${c.to}`);
    const input = c.from === 'pcm' ? ['-f', 's16le', '-ar', String(c.fromRate), '-ac', '1'] : ['-f', MUXERS[c.from]];
    const args = ['-hide_banner', '-loglevel', 'error', ...input, '-i', 'pipe:0', '-vn', '-ac', '1', '-ar', String(c.toRate), '-c:a', encoder,
      ...(c.to === 'aac' || c.to === 'mp3' || c.to === 'opus' ? ['-b:a', '64k'] : []), '-flush_packets', '1', '-f', MUXERS[c.to], 'pipe:1'];
    const child = spawn(this.bin, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    return new Converted(child, source, onFailure);
  }
}

/** Encodes a whole S16LE mono PCM buffer at `rate` into `to` (ffmpeg's encoder and muxer for it, 64 kbit/s where it has a bit rate). */
export function encodeWith(ffmpeg: Ffmpeg, pcm: Buffer, rate: number, to: SpeechFormat): Promise<Buffer> {
  const out: Buffer[] = [];
  let err = '';
  return new Promise((resolve, reject) => {
    const source = Object.assign(Readable.from([pcm]), { complete: true });
    const reply = ffmpeg.convert(source, { from: 'pcm', fromRate: rate, to, toRate: rate }, (detail) => { err = detail; });
    reply.on('data', (d: Buffer) => out.push(d));
    reply.once('error', reject);
    reply.once('end', () => (reply.complete ? resolve(Buffer.concat(out)) : reject(new Error(err || 'ffmpeg did not finish'))));
  });
}

class Converted extends Readable implements ConvertedReply {
  private ok = false;
  private stderr = '';

  constructor(private readonly child: ChildProcess, private readonly source: SourceReply, onFailure: (detail: string) => void) {
    super();
    const { stdin, stdout, stderr } = child as ChildProcess & { stdin: NodeJS.WritableStream; stdout: Readable; stderr: Readable };
    stderr.on('data', (d: Buffer) => { if (this.stderr.length < STDERR_LIMIT) this.stderr += d.toString('utf8'); });
    // ffmpeg gone early (killed, or a decoding error): its stdin refuses writes; the exit says what happened
    stdin.on('error', () => undefined);
    source.pipe(stdin);
    const broken = () => { if (!source.complete) this.kill(); };
    source.once('error', broken);
    source.once('close', broken);
    stdout.on('data', (chunk: Buffer) => { if (!this.push(chunk)) stdout.pause(); });
    child.once('error', (e) => { onFailure(`ffmpeg: ${e.message}`); this.destroy(e); });
    child.once('close', (code, signal) => {
      this.ok = code === 0 && source.complete;
      if (code !== 0 && signal === null) onFailure(`ffmpeg exited ${code}: ${this.stderr.trim().slice(0, 500)}`);
      this.push(null);
    });
  }

  get complete(): boolean { return this.ok; }

  override _read(): void {
    this.child.stdout?.resume();
  }

  override _destroy(err: Error | null, cb: (e: Error | null) => void): void {
    this.kill();
    if (!this.source.complete) this.source.destroy();
    cb(err);
  }

  private kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}

/**
 * Looks for ffmpeg once (`ffmpeg -hide_banner -encoders`): the binary named by TOLLGATE_FFMPEG, else
 * `ffmpeg` on the PATH; an empty TOLLGATE_FFMPEG or `none` means none is used. Undefined when there is none.
 */
export async function findFfmpeg(env: NodeJS.ProcessEnv = process.env): Promise<Ffmpeg | undefined> {
  const bin = env.TOLLGATE_FFMPEG ?? 'ffmpeg';
  if (bin === '' || bin === 'none') return undefined;
  const out = await new Promise<string | undefined>((resolve) => {
    let text = '';
    let child: ChildProcess;
    try { child = spawn(bin, ['-hide_banner', '-encoders'], { stdio: ['ignore', 'pipe', 'ignore'] }); } catch { resolve(undefined); return; }
    const timer = setTimeout(() => { child.kill('SIGKILL'); resolve(undefined); }, 10_000);
    child.stdout?.on('data', (d: Buffer) => { text += d.toString('utf8'); });
    child.once('error', () => { clearTimeout(timer); resolve(undefined); });
    child.once('close', (code) => { clearTimeout(timer); resolve(code === 0 ? text : undefined); });
  });
  if (out === undefined) return undefined;
  // lines such as " A....D libmp3lame           libmp3lame MP3 (MPEG audio layer 3) (codec mp3)"
  const encoders = new Set<string>();
  for (const line of out.split('\n')) {
    const m = /^\s*A[.A-Z]{5}\s+(\S+)/.exec(line);
    if (m) encoders.add(m[1]!);
  }
  return new Ffmpeg(bin, encoders);
}

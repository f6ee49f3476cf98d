// Audio formats Tollgate and sim make from S16LE mono PCM, each behind one streaming encoder shape.
//
// Real codecs: pcm, wav, flac (verbatim), mp3 (lamejs), ulaw, alaw. SILENT streams: opus and aac — valid
// Ogg Opus / ADTS that decoders accept with the right duration, but no sound (no pure-JS encoder here).
import { bytes, encodeG711, int16, resample, wavHeader } from './pcm.js';
import { FlacEncoder } from './flac.js';
import { Mp3Encoder } from './mp3.js';
import { SilentOpusEncoder } from './ogg.js';
import { SilentAacEncoder } from './aac.js';

export * from './pcm.js';
export { id3v2, vorbisComment } from './tags.js';
export { FlacEncoder, flacFrame, flacHeader } from './flac.js';
export { Mp3Encoder } from './mp3.js';
export { SilentOpusEncoder } from './ogg.js';
export { SilentAacEncoder } from './aac.js';

export type Codec = 'pcm' | 'wav' | 'flac' | 'mp3' | 'opus' | 'aac' | 'ulaw' | 'alaw';

/** Turns S16LE mono PCM, read by read, into the client's format (same shape as meter/synthesis.ts's AudioEncoder). */
export interface AudioEncoder {
  push(chunk: Buffer): Buffer;
  end(): Buffer;
}

export interface EncoderOptions {
  /** Rate of the PCM pushed in. */
  inRate: number;
  /** Rate of the output (default: inRate). Opus is always 48 kHz inside; this is its declared input rate. */
  outRate?: number;
  /** Samples (at inRate) the whole audio will have, when known: WAV and FLAC headers state it; else streamed "unknown length". */
  totalSamples?: number;
  /** Text tags where the container has them (mp3/aac: ID3v2 TXXX; flac/opus: Vorbis comments). */
  tags?: Readonly<Record<string, string>>;
  /** MP3 bit rate in kbit/s (default 64). */
  kbps?: number;
}

/** The content type each codec is served with. */
export const CONTENT_TYPES: Readonly<Record<Codec, string>> = {
  pcm: 'audio/pcm', wav: 'audio/wav', flac: 'audio/flac', mp3: 'audio/mpeg', opus: 'audio/ogg', aac: 'audio/aac', ulaw: 'audio/basic', alaw: 'audio/x-alaw-basic',
};

export function audioEncoder(codec: Codec, o: EncoderOptions): AudioEncoder {
  const outRate = o.outRate ?? o.inRate;
  const tags = o.tags ?? {};
  let carry: Buffer | undefined;
  /** Whole samples of this read (an odd byte waits for the next), resampled to outRate. */
  const samples = (chunk: Buffer): Int16Array => {
    let buf = carry ? Buffer.concat([carry, chunk]) : chunk;
    carry = undefined;
    if (buf.length & 1) { carry = buf.subarray(buf.length - 1); buf = buf.subarray(0, buf.length - 1); }
    const s = int16(buf);
    return outRate === o.inRate ? s : resample(s, o.inRate, outRate);
  };
  const total = o.totalSamples === undefined ? undefined : Math.floor((o.totalSamples * outRate) / o.inRate);
  switch (codec) {
    case 'pcm': return { push: (c) => Buffer.from(bytes(samples(c))), end: () => Buffer.alloc(0) };
    case 'ulaw': case 'alaw': return { push: (c) => encodeG711(samples(c), codec), end: () => Buffer.alloc(0) };
    case 'wav': {
      let started = false;
      return {
        push: (c) => {
          const body = Buffer.from(bytes(samples(c)));
          if (started) return body;
          started = true;
          // unknown length: the sizes say 0xFFFFFFFF-ish, as streamed WAV does (decoders read to the end)
          const h = wavHeader(total === undefined ? 0xffffffff - 36 : total * 2, outRate);
          return Buffer.concat([h, body]);
        },
        end: () => (started ? Buffer.alloc(0) : (started = true, wavHeader(0, outRate))),
      };
    }
    case 'flac': {
      const e = new FlacEncoder(outRate, total ?? 0, tags);
      return { push: (c) => e.push(samples(c)), end: () => e.end() };
    }
    case 'mp3': {
      const e = new Mp3Encoder(outRate, o.kbps ?? 64, tags);
      return { push: (c) => e.push(samples(c)), end: () => e.end() };
    }
    case 'opus': {
      const e = new SilentOpusEncoder(outRate, tags);
      return { push: (c) => e.push(samples(c).length), end: () => e.end() };
    }
    case 'aac': {
      const e = new SilentAacEncoder(outRate, tags);
      return { push: (c) => e.push(samples(c).length), end: () => e.end() };
    }
  }
}

/** Encodes a whole PCM buffer at once. */
export function encodeAudio(codec: Codec, pcm: Buffer, o: Omit<EncoderOptions, 'totalSamples'>): Buffer {
  const e = audioEncoder(codec, { ...o, totalSamples: pcm.length >> 1 });
  return Buffer.concat([e.push(pcm), e.end()]);
}

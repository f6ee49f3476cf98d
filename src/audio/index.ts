// Audio formats Tollgate and sim make from S16LE mono PCM, each behind one streaming encoder shape.
//
// Real codecs: pcm, wav, flac (verbatim), mp3 (lamejs), opus (libopus via opusscript, in Ogg), ulaw, alaw.
// aac is a SILENT stream (valid ADTS of the right duration, no sound: no AAC encoder in JS here), kept for the
// container tests: neither Tollgate nor sim serves it (both make aac with ffmpeg, src/audio/ffmpeg.ts).
import { bytes, encodeG711, int16, StreamResampler, wavHeader } from './pcm.js';
import { FlacEncoder } from './flac.js';
import { Mp3Encoder } from './mp3.js';
import { OpusEncoder } from './opus.js';
import { SilentAacEncoder } from './aac.js';

export * from './pcm.js';
export { id3v2, vorbisComment } from './tags.js';
export { FlacEncoder, flacFrame, flacHeader } from './flac.js';
export { Mp3Encoder } from './mp3.js';
export { OpusEncoder } from './opus.js';
export { SilentAacEncoder } from './aac.js';

export type Codec = 'pcm' | 'wav' | 'flac' | 'mp3' | 'opus' | 'aac' | 'ulaw' | 'alaw';

/** Turns S16LE mono PCM, read by read, into the client's format (same shape as meter/synthesis.ts's AudioEncoder). */
export interface AudioEncoder {
  push(chunk: Buffer): Buffer;
  end(): Buffer;
  /** Gives up without finishing (the client left): frees what the encoder holds (opus: WebAssembly memory). */
  close?(): void;
}

export interface EncoderOptions {
  /** Rate of the PCM pushed in. */
  inRate: number;
  /** Rate of the output (default: inRate). Opus decodes at 48 kHz whatever this is; it is the rate its header declares. */
  outRate?: number;
  /** Samples (at inRate) the whole audio will have, when known: WAV and FLAC headers state it; else streamed "unknown length". */
  totalSamples?: number;
  /** Text tags where the container has them (mp3/aac: ID3v2 TXXX; flac/opus: Vorbis comments). */
  tags?: Readonly<Record<string, string>>;
  /** MP3 and Opus bit rate in kbit/s (default 64). */
  kbps?: number;
  /** WAV of unknown length: hold the samples until the end and write the header with their size (a whole reply, not a stream). */
  hold?: boolean;
}

/** The content type each codec is served with. */
export const CONTENT_TYPES: Readonly<Record<Codec, string>> = {
  pcm: 'audio/pcm', wav: 'audio/wav', flac: 'audio/flac', mp3: 'audio/mpeg', opus: 'audio/ogg', aac: 'audio/aac', ulaw: 'audio/basic', alaw: 'audio/x-alaw-basic',
};

/** An encoder of whole samples already at the output rate. */
interface SampleSink { push(s: Int16Array): Buffer; end(): Buffer; close?(): void }

function sink(codec: Codec, rate: number, total: number | undefined, o: EncoderOptions): SampleSink {
  const tags = o.tags ?? {};
  const none = () => Buffer.alloc(0);
  switch (codec) {
    case 'pcm': return { push: (s) => Buffer.from(bytes(s)), end: none };
    case 'ulaw': case 'alaw': return { push: (s) => encodeG711(s, codec), end: none };
    case 'wav': {
      if (o.hold) {
        // a whole reply: the samples wait for the end, so the header states their real size
        const held: Buffer[] = [];
        return { push: (s) => { held.push(Buffer.from(bytes(s))); return Buffer.alloc(0); },
          end: () => { const data = Buffer.concat(held); return Buffer.concat([wavHeader(data.length, rate), data]); } };
      }
      // unknown length: the sizes say 0xFFFFFFFF-ish, as streamed WAV does (decoders read to the end)
      let started = false;
      const head = () => (started ? Buffer.alloc(0) : (started = true, wavHeader(total === undefined ? 0xffffffff - 36 : total * 2, rate)));
      return { push: (s) => Buffer.concat([head(), Buffer.from(bytes(s))]), end: () => (started ? none() : (started = true, wavHeader(0, rate))) };
    }
    case 'flac': return new FlacEncoder(rate, total ?? 0, tags);
    case 'mp3': return new Mp3Encoder(rate, o.kbps ?? 64, tags);
    case 'opus': return new OpusEncoder(rate, o.kbps ?? 64, tags);
    case 'aac': {
      const e = new SilentAacEncoder(rate, tags);
      return { push: (s) => e.push(s.length), end: () => e.end() };
    }
  }
}

/** S16LE bytes in reads of any size, resampled and handed to `to`: whole samples only, an odd byte waits for the next read. */
function samplesTo(rs: StreamResampler, to: (s: Int16Array) => Buffer): (chunk: Buffer) => Buffer {
  let carry: Buffer | undefined;
  return (chunk) => {
    let buf = carry ? Buffer.concat([carry, chunk]) : chunk;
    carry = undefined;
    if (buf.length & 1) { carry = Buffer.from(buf.subarray(buf.length - 1)); buf = buf.subarray(0, buf.length - 1); }
    return to(rs.push(int16(buf)));
  };
}

export function audioEncoder(codec: Codec, o: EncoderOptions): AudioEncoder {
  const outRate = o.outRate ?? o.inRate;
  const total = o.totalSamples === undefined ? undefined : Math.floor((o.totalSamples * outRate) / o.inRate);
  const out = sink(codec, outRate, total, o);
  const rs = new StreamResampler(o.inRate, outRate);
  return {
    push: samplesTo(rs, (s) => out.push(s)),
    end: () => Buffer.concat([out.push(rs.end()), out.end()]),
    close: () => out.close?.(),
  };
}

/**
 * One stream made of several pieces of audio (a stream-input socket's generations, one context's): each
 * `piece()` is an encoder for one piece. Opus pieces continue one Ogg Opus stream (one BOS page, one
 * serial, granules only growing: the pieces joined are one valid file; a piece's end pads it with
 * silence to a whole packet, OpusEncoder.boundary). The other codecs make each piece on its own, as they
 * concatenate as they are (raw samples, MP3 frames). `close` frees what the stream holds.
 */
export interface PieceStream { piece(): AudioEncoder; close(): void }

export function pieceStream(codec: Codec, o: EncoderOptions): PieceStream {
  if (codec !== 'opus') return { piece: () => audioEncoder(codec, o), close: () => undefined };
  const opus = new OpusEncoder(o.outRate ?? o.inRate, o.kbps ?? 64, o.tags ?? {});
  const rs = () => new StreamResampler(o.inRate, o.outRate ?? o.inRate);
  return {
    piece: () => {
      const r = rs();
      return {
        push: samplesTo(r, (s) => opus.push(s)),
        end: () => Buffer.concat([opus.push(r.end()), opus.boundary()]),
        // a piece given up (its upstream broke): the stream itself ends with the session (close)
        close: () => undefined,
      };
    },
    close: () => opus.close(),
  };
}

/** Encodes a whole PCM buffer at once. */
export function encodeAudio(codec: Codec, pcm: Buffer, o: Omit<EncoderOptions, 'totalSamples'>): Buffer {
  const e = audioEncoder(codec, { ...o, totalSamples: pcm.length >> 1 });
  return Buffer.concat([e.push(pcm), e.end()]);
}
export { fromWav } from './wav-stream.js';

// FLAC from S16LE mono PCM: verbatim subframes (no prediction: lossless and valid, about the size of the PCM), a STREAMINFO and a Vorbis comment block.
import { vorbisComment } from './tags.js';

const BLOCK = 4096;

function crc8(buf: Buffer): number {
  let c = 0;
  for (const b of buf) {
    c ^= b;
    for (let i = 0; i < 8; i++) c = c & 0x80 ? ((c << 1) ^ 0x07) & 0xff : (c << 1) & 0xff;
  }
  return c;
}

function crc16(buf: Buffer): number {
  let c = 0;
  for (const b of buf) {
    c ^= b << 8;
    for (let i = 0; i < 8; i++) c = c & 0x8000 ? ((c << 1) ^ 0x8005) & 0xffff : (c << 1) & 0xffff;
  }
  return c;
}

/** FLAC's UTF-8-like coding of a frame number. */
function codedNumber(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const out: number[] = [];
  let bytes = 2;
  while (n >= 2 ** (5 * bytes + 1)) bytes++;
  for (let i = bytes - 1; i > 0; i--) out.unshift(0x80 | ((n >> (6 * (bytes - 1 - i))) & 0x3f));
  const lead = (0xff << (8 - bytes)) & 0xff;
  out.unshift(lead | (n >> (6 * (bytes - 1))));
  return Buffer.from(out);
}

/** `fLaC`, STREAMINFO (total samples 0 = unknown) and, when there are tags, a VORBIS_COMMENT block. */
export function flacHeader(sampleRate: number, totalSamples: number, tags: Readonly<Record<string, string>> = {}): Buffer {
  const si = Buffer.alloc(34);
  si.writeUInt16BE(BLOCK, 0); si.writeUInt16BE(BLOCK, 2); // min/max block size; min/max frame size 0 (unknown)
  // 20 bits rate, 3 bits channels-1 (0), 5 bits bps-1 (15), 36 bits total samples
  const total = BigInt(totalSamples);
  const packed = (BigInt(sampleRate) << 44n) | (0n << 41n) | (15n << 36n) | (total & 0xfffffffffn);
  for (let i = 0; i < 8; i++) si[10 + i] = Number((packed >> BigInt(8 * (7 - i))) & 0xffn);
  const hasTags = Object.keys(tags).length > 0;
  const blockHead = (type: number, last: boolean, len: number) => Buffer.from([(last ? 0x80 : 0) | type, (len >> 16) & 0xff, (len >> 8) & 0xff, len & 0xff]);
  const parts: Buffer[] = [Buffer.from('fLaC', 'latin1'), blockHead(0, !hasTags, 34), si];
  if (hasTags) {
    const vc = vorbisComment('tollgate', tags);
    parts.push(blockHead(4, true, vc.length), vc);
  }
  return Buffer.concat(parts);
}

/** One frame of up to 65536 samples, verbatim, numbered `n` (fixed-blocksize stream). */
export function flacFrame(samples: Int16Array, n: number): Buffer {
  const head = Buffer.concat([
    Buffer.from([0xff, 0xf8, 0x70, 0x08]), // sync + fixed blocking; block size 16-bit at end (0111), rate from STREAMINFO (0000); mono, 16 bits
    codedNumber(n),
    Buffer.from([((samples.length - 1) >> 8) & 0xff, (samples.length - 1) & 0xff]),
  ]);
  const body = Buffer.alloc(1 + samples.length * 2);
  body[0] = 0x02; // subframe: verbatim, no wasted bits
  for (let i = 0; i < samples.length; i++) body.writeInt16BE(samples[i]!, 1 + i * 2);
  const frame = Buffer.concat([head, Buffer.from([crc8(head)]), body, Buffer.alloc(2)]);
  frame.writeUInt16BE(crc16(frame.subarray(0, frame.length - 2)), frame.length - 2);
  return frame;
}

/** A streaming FLAC encoder: header first, then a frame per 4096 samples, the remainder at the end. */
export class FlacEncoder {
  private pending: number[] = [];
  private frame = 0;
  private started = false;

  constructor(private readonly sampleRate: number, private readonly totalSamples = 0, private readonly tags: Readonly<Record<string, string>> = {}) {}

  push(samples: Int16Array): Buffer {
    const out: Buffer[] = [];
    if (!this.started) { this.started = true; out.push(flacHeader(this.sampleRate, this.totalSamples, this.tags)); }
    for (const s of samples) this.pending.push(s);
    while (this.pending.length >= BLOCK) out.push(flacFrame(Int16Array.from(this.pending.splice(0, BLOCK)), this.frame++));
    return Buffer.concat(out);
  }

  end(): Buffer {
    const out = [this.push(new Int16Array(0))];
    if (this.pending.length > 0) out.push(flacFrame(Int16Array.from(this.pending.splice(0)), this.frame++));
    return Buffer.concat(out);
  }
}

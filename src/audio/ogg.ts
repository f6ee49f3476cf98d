// Ogg Opus made of SILENT frames: this build has no Opus encoder (none in pure JS that we trust), so the
// stream is valid (OpusHead, OpusTags, 20 ms CELT frames that decode to silence, exact granule positions)
// and lasts exactly as long as the audio it stands for, but carries no sound. Tags carry text.
import { vorbisComment } from './tags.js';

const CRC = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let r = i << 24;
    for (let j = 0; j < 8; j++) r = r & 0x80000000 ? (r << 1) ^ 0x04c11db7 : r << 1;
    t[i] = r >>> 0;
  }
  return t;
})();

function crc32(buf: Buffer): number {
  let c = 0;
  for (const b of buf) c = ((c << 8) ^ CRC[((c >>> 24) ^ b) & 0xff]!) >>> 0;
  return c >>> 0;
}

const SERIAL = 0x546f6c6c; // 'Toll'
const PRE_SKIP = 312;
/** A 20 ms CELT fullband mono frame (TOC 0xF8) that decodes to silence. */
const SILENT_FRAME = Buffer.from([0xf8, 0xff, 0xfe]);
const FRAME_48K = 960;
const FRAMES_PER_PAGE = 50;

function page(packets: Buffer[], granule: bigint, seq: number, flags: number): Buffer {
  const lacing: number[] = [];
  for (const p of packets) {
    let n = p.length;
    while (n >= 255) { lacing.push(255); n -= 255; }
    lacing.push(n);
  }
  const h = Buffer.alloc(27 + lacing.length);
  h.write('OggS', 0, 'latin1'); h[4] = 0; h[5] = flags;
  h.writeBigUInt64LE(granule, 6); h.writeUInt32LE(SERIAL, 14); h.writeUInt32LE(seq, 18); h.writeUInt32LE(0, 22);
  h[26] = lacing.length; Buffer.from(lacing).copy(h, 27);
  const pg = Buffer.concat([h, ...packets]);
  pg.writeUInt32LE(crc32(pg), 22);
  return pg;
}

/**
 * A streaming silent Ogg Opus encoder: `push(ms)` adds audio time; pages of 1 s are written as they
 * fill; `end()` writes the last page with the exact end granule (the decoder trims the last frame).
 */
export class SilentOpusEncoder {
  private seq = 0;
  private started = false;
  /** 48 kHz samples the audio has (not rounded to frames). */
  private samples = 0;
  private framesWritten = 0;

  constructor(private readonly inputRate: number, private readonly tags: Readonly<Record<string, string>> = {}) {}

  private header(): Buffer {
    const head = Buffer.alloc(19);
    head.write('OpusHead', 0, 'latin1'); head[8] = 1; head[9] = 1; head.writeUInt16LE(PRE_SKIP, 10);
    head.writeUInt32LE(this.inputRate, 12); head.writeInt16LE(0, 16); head[18] = 0;
    const tags = Buffer.concat([Buffer.from('OpusTags', 'latin1'), vorbisComment('tollgate (silent frames)', this.tags)]);
    return Buffer.concat([page([head], 0n, this.seq++, 0x02), page([tags], 0n, this.seq++, 0)]);
  }

  /** Adds `inputSamples` samples at the input rate. */
  push(inputSamples: number): Buffer {
    const out: Buffer[] = [];
    if (!this.started) { this.started = true; out.push(this.header()); }
    this.samples += Math.round((inputSamples * 48_000) / this.inputRate);
    // a granule position counts every decoded sample, the pre-skip included
    while ((this.framesWritten + FRAMES_PER_PAGE) * FRAME_48K <= PRE_SKIP + this.samples) {
      this.framesWritten += FRAMES_PER_PAGE;
      out.push(page(Array(FRAMES_PER_PAGE).fill(SILENT_FRAME), BigInt(this.framesWritten * FRAME_48K), this.seq++, 0));
    }
    return Buffer.concat(out);
  }

  end(): Buffer {
    const out = [this.push(0)];
    const frames = Math.ceil((PRE_SKIP + this.samples) / FRAME_48K) - this.framesWritten;
    out.push(page(Array(Math.max(frames, 0)).fill(SILENT_FRAME), BigInt(PRE_SKIP + this.samples), this.seq++, 0x04));
    return Buffer.concat(out);
  }
}

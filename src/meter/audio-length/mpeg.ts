// MPEG audio (MP3, MP2, MP1) and ADTS (raw AAC) lengths counted by walking every frame header through the bytes; a Xing/Info/VBRI total is never read.
import { SampleSum, type Counted } from './types.js';

const KBPS: Readonly<Record<string, readonly number[]>> = {
  '1-1': [0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
  '1-2': [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
  '1-3': [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  '2-1': [0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
  '2-2': [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
  '2-3': [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
};
const MPEG_RATES: Readonly<Record<number, readonly number[]>> = { 3: [44_100, 48_000, 32_000], 2: [22_050, 24_000, 16_000], 0: [11_025, 12_000, 8_000] };
const ADTS_RATES = [96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025, 8_000, 7_350];

interface Frame { length: number; samples: number; rate: number; channels: number }

/** The MPEG audio frame whose header starts at `p`, or undefined when those 4 bytes are not one (free format included). */
export function mpegFrame(d: Buffer, p: number): Frame | undefined {
  if (p + 4 > d.length || d[p] !== 0xff || (d[p + 1]! & 0xe0) !== 0xe0) return undefined;
  const version = (d[p + 1]! >> 3) & 3; // 3 MPEG-1, 2 MPEG-2, 0 MPEG-2.5
  const layer = 4 - ((d[p + 1]! >> 1) & 3); // 1, 2, 3 (4: reserved, or ADTS)
  const bi = d[p + 2]! >> 4;
  const ri = (d[p + 2]! >> 2) & 3;
  if (version === 1 || layer === 4 || bi === 0 || bi === 15 || ri === 3) return undefined;
  const kbps = KBPS[`${version === 3 ? 1 : 2}-${layer}`]![bi]!;
  const rate = MPEG_RATES[version]![ri]!;
  const pad = (d[p + 2]! >> 1) & 1;
  const samples = layer === 1 ? 384 : layer === 3 && version !== 3 ? 576 : 1152;
  const length = layer === 1 ? (Math.floor((12 * kbps * 1000) / rate) + pad) * 4 : Math.floor(((samples / 8) * kbps * 1000) / rate) + pad;
  return { length, samples, rate, channels: d[p + 3]! >> 6 === 3 ? 1 : 2 };
}

/** The ADTS frame whose header starts at `p`, or undefined. */
export function adtsFrame(d: Buffer, p: number): Frame | undefined {
  if (p + 7 > d.length || d[p] !== 0xff || (d[p + 1]! & 0xf6) !== 0xf0) return undefined;
  const rate = ADTS_RATES[(d[p + 2]! >> 2) & 0x0f];
  const length = ((d[p + 3]! & 0x03) << 11) | (d[p + 4]! << 3) | (d[p + 5]! >> 5);
  if (rate === undefined || length < 7) return undefined;
  return { length, samples: 1024 * ((d[p + 6]! & 0x03) + 1), rate, channels: ((d[p + 2]! & 1) << 2) | (d[p + 3]! >> 6) };
}

/** Bytes of the ID3v2 tags at `p` (one after another), 0 when there are none. */
export function id3Length(d: Buffer, p: number): number {
  let q = p;
  while (q + 10 <= d.length && d.toString('latin1', q, q + 3) === 'ID3') {
    const size = ((d[q + 6]! & 0x7f) << 21) | ((d[q + 7]! & 0x7f) << 14) | ((d[q + 8]! & 0x7f) << 7) | (d[q + 9]! & 0x7f);
    q += 10 + size + (d[q + 5]! & 0x10 ? 10 : 0);
  }
  return Math.min(q, d.length) - p;
}

/** A tag that may end an MPEG stream (ID3v1, APEv2, Lyrics3) or sit inside it (ID3v2): its bytes, 0 when none is at `p`. */
function tagAt(d: Buffer, p: number): number {
  const b = d[p];
  if (b !== 0x49 && b !== 0x41 && b !== 0x54) return 0; // I, A, T
  const id3 = id3Length(d, p);
  if (id3 > 0) return id3;
  if (d.toString('latin1', p, p + 8) === 'APETAGEX' && p + 16 <= d.length) return Math.min(d.length - p, 32 + d.readUInt32LE(p + 12));
  if (d.toString('latin1', p, p + 3) === 'TAG' && d.length - p <= 128 + 32) return d.length - p;
  return 0;
}

/** Whether the MPEG frame at `p` is a Xing/Info/VBRI header: a decoder reads it as the stream's header and plays nothing of it. */
function isInfoFrame(d: Buffer, p: number, f: Frame): boolean {
  const mono = f.channels === 1;
  const side = f.samples === 1152 ? (mono ? 17 : 32) : (mono ? 9 : 17);
  const at = (o: number, s: string) => d.toString('latin1', p + o, p + o + 4) === s;
  return at(4 + side, 'Xing') || at(4 + side, 'Info') || at(36, 'VBRI');
}

/**
 * Walks frame headers through the whole buffer: a frame counts when all its bytes are present and it
 * follows the previous frame, or (after bytes that are no frame) when the next frame follows it. Tags
 * count as read; what is neither tag nor frame is left `uncovered` for the caller to judge.
 */
function walk(d: Buffer, frameAt: (d: Buffer, p: number) => Frame | undefined, mpeg: boolean): Counted | undefined {
  let p = 0;
  const sum = new SampleSum();
  let frames = 0;
  let uncovered = 0;
  let chained = false;
  let first: Frame | undefined;
  while (p < d.length) {
    const tag = tagAt(d, p);
    if (tag > 0) { p += tag; chained = true; continue; }
    const f = frameAt(d, p);
    const fits = f !== undefined && p + f.length <= d.length;
    const follows = fits && (chained || p + f.length === d.length || frameAt(d, p + f.length) !== undefined || tagAt(d, p + f.length) > 0);
    if (!f || !fits || !follows) { p++; uncovered++; chained = false; continue; }
    if (!(mpeg && frames === 0 && first === undefined && isInfoFrame(d, p, f))) { sum.add(f.samples, f.rate); frames++; }
    first ??= f;
    p += f.length;
    chained = true;
  }
  if (frames === 0 || !first) return undefined;
  return { seconds: sum.seconds, uncovered, container: mpeg ? 'MPEG' : 'ADTS/MPEG-4', codec: mpeg ? 'MPEG audio' : 'AAC', sampleRate: first.rate, channels: first.channels };
}

/** MP3 (and MP1/MP2): every frame's 1152 or 576 (384) samples at its rate. */
export function mpegLength(d: Buffer): Counted | undefined {
  return walk(d, mpegFrame, true);
}

/** ADTS: every frame's raw data blocks, 1024 samples each. */
export function adtsLength(d: Buffer): Counted | undefined {
  return walk(d, adtsFrame, false);
}

// FLAC length from its frames: each frame header's block size, frame by frame; STREAMINFO's total is never read (its rate only stands in for frames that refer to it).
import { SampleSum, type Counted } from './types.js';
import { id3Length } from './mpeg.js';

const RATES = [0, 88_200, 176_400, 192_000, 8_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000, 96_000];

const CRC8 = table(8, 0x07);
const CRC16 = table(16, 0x8005);

function table(bits: number, poly: number): Uint16Array {
  const t = new Uint16Array(256);
  const top = 1 << (bits - 1);
  const mask = (1 << bits) - 1;
  for (let i = 0; i < 256; i++) {
    let c = i << (bits - 8);
    for (let j = 0; j < 8; j++) c = c & top ? ((c << 1) ^ poly) & mask : (c << 1) & mask;
    t[i] = c;
  }
  return t;
}

interface Header { length: number; blockSize: number; rate: number; number: number; variable: boolean }

/** The frame header at `p` when its sync, reserved bits and CRC-8 hold; `rate` 0 means STREAMINFO's. */
export function flacHeader(d: Buffer, p: number): Header | undefined {
  if (p + 6 > d.length || d[p] !== 0xff || (d[p + 1]! & 0xfe) !== 0xf8) return undefined;
  const bsCode = d[p + 2]! >> 4;
  const rCode = d[p + 2]! & 0x0f;
  const ch = d[p + 3]! >> 4;
  if (bsCode === 0 || rCode === 15 || ch > 10 || ((d[p + 3]! >> 1) & 7) === 3 || (d[p + 3]! & 1) !== 0) return undefined;
  // the frame or sample number, coded as UTF-8 codes numbers
  let q = p + 4;
  const lead = d[q]!;
  let ones = 0;
  while (ones < 8 && lead & (0x80 >> ones)) ones++;
  if (ones === 1 || ones > 7) return undefined;
  let number = ones === 0 ? lead : lead & (0x7f >> ones);
  q++;
  for (let i = 1; i < ones; i++, q++) {
    if (q >= d.length || (d[q]! & 0xc0) !== 0x80) return undefined;
    number = number * 64 + (d[q]! & 0x3f);
  }
  let blockSize: number;
  if (bsCode === 1) blockSize = 192;
  else if (bsCode <= 5) blockSize = 576 << (bsCode - 2);
  else if (bsCode === 6) { blockSize = (d[q] ?? 0) + 1; q += 1; }
  else if (bsCode === 7) { blockSize = ((d[q] ?? 0) << 8 | (d[q + 1] ?? 0)) + 1; q += 2; }
  else blockSize = 256 << (bsCode - 8);
  let rate = RATES[rCode] ?? 0;
  if (rCode === 12) { rate = (d[q] ?? 0) * 1000; q += 1; }
  else if (rCode === 13) { rate = (d[q] ?? 0) << 8 | (d[q + 1] ?? 0); q += 2; }
  else if (rCode === 14) { rate = ((d[q] ?? 0) << 8 | (d[q + 1] ?? 0)) * 10; q += 2; }
  if (q >= d.length) return undefined;
  let crc = 0;
  for (let i = p; i < q; i++) crc = CRC8[crc ^ d[i]!]!;
  if (crc !== d[q]) return undefined;
  return { length: q + 1 - p, blockSize, rate, number, variable: (d[p + 1]! & 1) === 1 };
}

/**
 * After the metadata blocks, each frame runs to the next header that carries the next frame's number
 * (or at which the frame's CRC-16 comes out right); the frame counts its block size when whole. A frame
 * whose CRC-16 fails inside the file (so also one that swallowed a header skipped over) makes the whole file
 * `uncovered`, a cut-off last frame and bytes before the first frame count as such: the caller decodes a
 * file it cannot trust the walk of.
 */
export function flacLength(d: Buffer): Counted | undefined {
  let p = id3Length(d, 0);
  if (d.toString('latin1', p, p + 4) !== 'fLaC') return undefined;
  p += 4;
  let infoRate = 0;
  let channels = 1;
  for (let last = false; !last && p + 4 <= d.length;) {
    last = (d[p]! & 0x80) !== 0;
    const len = (d[p + 1]! << 16) | (d[p + 2]! << 8) | d[p + 3]!;
    if ((d[p]! & 0x7f) === 0 && p + 4 + 18 <= d.length) {
      infoRate = (d[p + 14]! << 12) | (d[p + 15]! << 4) | (d[p + 16]! >> 4);
      channels = ((d[p + 16]! >> 1) & 7) + 1;
    }
    p += 4 + len;
  }
  let uncovered = 0;
  while (p < d.length && !flacHeader(d, p)) { p++; uncovered++; }
  const sum = new SampleSum();
  let firstRate = 0;
  while (p < d.length) {
    const h = flacHeader(d, p)!;
    const rate = h.rate || infoRate;
    if (rate === 0) return undefined;
    const next = h.variable ? h.number + h.blockSize : h.number + 1;
    let crc = 0;
    let end = -1;
    for (let i = p; i < d.length; i++) {
      if (i >= p + h.length + 3 && d[i] === 0xff && (d[i + 1]! & 0xfe) === 0xf8) {
        const n = flacHeader(d, i);
        if (n && ((n.variable === h.variable && n.number === next) || crc === 0)) { end = i; break; }
      }
      crc = ((crc << 8) & 0xffff) ^ CRC16[(crc >> 8) ^ d[i]!]!;
    }
    const stop = end < 0 ? d.length : end;
    if (crc === 0) { sum.add(h.blockSize, rate); firstRate ||= rate; }
    // a cut-off last frame is not decoded; a damaged one inside the file is (decoders do not check the CRC by default): decode the file
    else uncovered += end < 0 ? stop - p : d.length;
    p = stop;
  }
  if (firstRate === 0) return undefined;
  return { seconds: sum.seconds, uncovered, container: 'FLAC', codec: 'FLAC', sampleRate: firstRate, channels };
}

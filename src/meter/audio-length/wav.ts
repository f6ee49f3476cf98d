// WAV (RIFF/WAVE) length from the data chunks actually present: bytes ÷ block align. The `fact` chunk and the RIFF and data sizes past the end are never believed.
import type { Counted } from './types.js';

/** PCM, IEEE float, A-law, μ-law: one block is one sample per channel, so bytes count samples. */
const BLOCK_CODECS: Readonly<Record<number, string>> = { 1: 'PCM', 3: 'IEEE float', 6: 'A-law', 7: 'μ-law' };

/**
 * Walks the chunks as a decoder does (after `data`, on to the next `data` chunk): every data chunk's
 * bytes present count, a size of 0 or 0xFFFFFFFF (streamed) runs to the end. Undefined for a codec
 * whose blocks are not samples (ADPCM, MP3 in WAV…): those are decoded to be measured.
 */
export function wavLength(d: Buffer): Counted | undefined {
  if (d.length < 12 || d.toString('latin1', 0, 4) !== 'RIFF' || d.toString('latin1', 8, 12) !== 'WAVE') return undefined;
  let fmt: { codec: string; channels: number; rate: number; align: number } | undefined;
  let dataBytes = 0;
  let p = 12;
  while (p + 8 <= d.length) {
    const id = d.toString('latin1', p, p + 4);
    const size = d.readUInt32LE(p + 4);
    const body = p + 8;
    if (id === 'fmt ' && body + 16 <= d.length) {
      let code = d.readUInt16LE(body);
      if (code === 0xfffe && body + 26 <= d.length) code = d.readUInt16LE(body + 24); // WAVE_FORMAT_EXTENSIBLE: the sub-format's code
      const codec = BLOCK_CODECS[code];
      const align = d.readUInt16LE(body + 12);
      if (codec === undefined || align === 0) return undefined;
      fmt = { codec, channels: d.readUInt16LE(body + 2), rate: d.readUInt32LE(body + 4), align };
    } else if (id === 'data') {
      if (!fmt) return undefined;
      const present = size === 0 || size === 0xffffffff ? d.length - body : Math.min(size, d.length - body);
      dataBytes += present;
      if (present < size || size === 0 || size === 0xffffffff) break;
    }
    p = body + size + (size & 1);
  }
  if (!fmt || fmt.rate === 0 || dataBytes === 0) return undefined;
  const samples = Math.floor(dataBytes / fmt.align);
  return { seconds: samples / fmt.rate, uncovered: 0, container: 'WAVE', codec: fmt.codec, sampleRate: fmt.rate, channels: fmt.channels };
}

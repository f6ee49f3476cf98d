// Signed 16-bit little-endian mono PCM: views, a resampler, G.711 μ-law and A-law, WAV wrap and parse. Pure TypeScript (Tollgate and sim).

/** The samples of S16LE bytes (an even length; a trailing odd byte is ignored). Copies when unaligned. */
export function int16(buf: Buffer): Int16Array {
  const n = buf.length >> 1;
  if (buf.byteOffset % 2 === 0) return new Int16Array(buf.buffer, buf.byteOffset, n);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) out[i] = buf.readInt16LE(i * 2);
  return out;
}

/** S16LE bytes of these samples (no copy). */
export function bytes(samples: Int16Array): Buffer {
  return Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
}

/** Rates the resampler is declared for (any pair works): the upstream's 24 kHz and the families' output rates. */
export const RATES = [8_000, 16_000, 22_050, 24_000, 44_100, 48_000] as const;

/** Linear interpolation between neighbouring samples (speech band; no anti-alias filter when going down). */
export function resample(input: Int16Array, from: number, to: number): Int16Array {
  if (from === to) return input.slice();
  const n = Math.floor((input.length * to) / from);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    const x = (i * from) / to;
    const j = Math.floor(x);
    const a = input[j] ?? 0;
    const b = input[j + 1] ?? a;
    out[i] = Math.round(a + (b - a) * (x - j));
  }
  return out;
}

/**
 * `resample` read by read: output sample n sits at input position n·from/to of the whole stream, so
 * the output is the same sample for sample as resampling the whole input at once, whatever the read
 * sizes (resampling each read on its own would drop a fraction of a sample per read and click at its edges).
 */
export class StreamResampler {
  /** Input samples not yet passed (from the global index `base` on). */
  private buf = new Int16Array(0);
  private base = 0;
  /** The next output sample's global index. */
  private n = 0;
  private received = 0;

  constructor(private readonly from: number, private readonly to: number) {}

  push(input: Int16Array): Int16Array {
    if (this.from === this.to) return input;
    this.append(input);
    // sample n needs the input at floor(x) and floor(x) + 1
    return this.emit((n) => Math.floor((n * this.from) / this.to) + 1 < this.received);
  }

  end(): Int16Array {
    if (this.from === this.to) return new Int16Array(0);
    const total = Math.floor((this.received * this.to) / this.from);
    return this.emit((n) => n < total);
  }

  private append(input: Int16Array): void {
    const next = new Int16Array(this.buf.length + input.length);
    next.set(this.buf); next.set(input, this.buf.length);
    this.buf = next;
    this.received += input.length;
  }

  private emit(ready: (n: number) => boolean): Int16Array {
    const out: number[] = [];
    for (; ready(this.n); this.n++) {
      const x = (this.n * this.from) / this.to;
      const j = Math.floor(x);
      const a = this.buf[j - this.base] ?? 0;
      const b = this.buf[j + 1 - this.base] ?? a;
      out.push(Math.round(a + (b - a) * (x - j)));
    }
    const keep = Math.min(Math.floor((this.n * this.from) / this.to), this.received);
    if (keep > this.base) { this.buf = this.buf.slice(keep - this.base); this.base = keep; }
    return Int16Array.from(out);
  }
}

/** G.711 μ-law of one sample. */
export function ulaw(sample: number): number {
  const BIAS = 0x84;
  let s = sample;
  const sign = s < 0 ? 0x80 : 0;
  if (s < 0) s = -s;
  if (s > 32635) s = 32635;
  s += BIAS;
  let exponent = 7;
  for (let mask = 0x4000; (s & mask) === 0 && exponent > 0; mask >>= 1) exponent--;
  const mantissa = (s >> (exponent + 3)) & 0x0f;
  return ~(sign | (exponent << 4) | mantissa) & 0xff;
}

/** The sample a μ-law byte stands for. */
export function ulawDecode(byte: number): number {
  const u = ~byte & 0xff;
  const t = (((u & 0x0f) << 3) + 0x84) << ((u & 0x70) >> 4);
  return u & 0x80 ? 0x84 - t : t - 0x84;
}

const SEG_END = [0x1f, 0x3f, 0x7f, 0xff, 0x1ff, 0x3ff, 0x7ff, 0xfff];

/** G.711 A-law of one sample. */
export function alaw(sample: number): number {
  let s = sample >> 3; // 13-bit
  let mask: number;
  if (s >= 0) mask = 0xd5; else { mask = 0x55; s = -s - 1; }
  let seg = 0;
  while (seg < 8 && s > SEG_END[seg]!) seg++;
  if (seg >= 8) return 0x7f ^ mask;
  let aval = seg << 4;
  aval |= seg < 2 ? (s >> 1) & 0x0f : (s >> seg) & 0x0f;
  return aval ^ mask;
}

/** The sample an A-law byte stands for. */
export function alawDecode(byte: number): number {
  const a = byte ^ 0x55;
  let t = (a & 0x0f) << 4;
  const seg = (a & 0x70) >> 4;
  if (seg === 0) t += 8; else if (seg === 1) t += 0x108; else t = (t + 0x108) << (seg - 1);
  return a & 0x80 ? t : -t;
}

export function encodeG711(samples: Int16Array, law: 'ulaw' | 'alaw'): Buffer {
  const out = Buffer.alloc(samples.length);
  const f = law === 'ulaw' ? ulaw : alaw;
  for (let i = 0; i < samples.length; i++) out[i] = f(samples[i]!);
  return out;
}

/** The 44-byte header of a PCM WAV holding `dataBytes` of S16LE at this rate (mono unless told). */
export function wavHeader(dataBytes: number, sampleRate: number, channels = 1): Buffer {
  const h = Buffer.alloc(44);
  h.write('RIFF', 0); h.writeUInt32LE(36 + dataBytes, 4); h.write('WAVE', 8);
  h.write('fmt ', 12); h.writeUInt32LE(16, 16); h.writeUInt16LE(1, 20); h.writeUInt16LE(channels, 22);
  h.writeUInt32LE(sampleRate, 24); h.writeUInt32LE(sampleRate * 2 * channels, 28); h.writeUInt16LE(2 * channels, 32); h.writeUInt16LE(16, 34);
  h.write('data', 36); h.writeUInt32LE(dataBytes, 40);
  return h;
}

export function wav(pcm: Buffer, sampleRate: number): Buffer {
  return Buffer.concat([wavHeader(pcm.length, sampleRate), pcm]);
}

export interface Wav { sampleRate: number; channels: number; bitsPerSample: number; format: number; data: Buffer }

/** The fmt and data chunks of a RIFF/WAVE file (other chunks skipped), or undefined when it is not one. */
export function parseWav(buf: Buffer): Wav | undefined {
  if (buf.length < 12 || buf.toString('latin1', 0, 4) !== 'RIFF' || buf.toString('latin1', 8, 12) !== 'WAVE') return undefined;
  let fmt: Omit<Wav, 'data'> | undefined;
  for (let p = 12; p + 8 <= buf.length;) {
    const id = buf.toString('latin1', p, p + 4);
    const size = buf.readUInt32LE(p + 4);
    const body = p + 8;
    if (id === 'fmt ' && body + 16 <= buf.length) {
      fmt = { format: buf.readUInt16LE(body), channels: buf.readUInt16LE(body + 2), sampleRate: buf.readUInt32LE(body + 4), bitsPerSample: buf.readUInt16LE(body + 14) };
    } else if (id === 'data' && fmt) {
      // a streamed WAV may say 0xFFFFFFFF: the data runs to the end
      return { ...fmt, data: buf.subarray(body, Math.min(buf.length, body + size)) };
    }
    p = body + size + (size & 1);
  }
  return undefined;
}

// AAC (ADTS) made of SILENT frames: this build has no AAC encoder in pure JS, so each 1024-sample frame is
// an AAC-LC single-channel element with no spectral data (decodes to silence). The stream is valid and
// lasts as long as the audio it stands for; an ID3v2 tag in front carries text.
import { id3v2 } from './tags.js';

const RATE_INDEX = new Map([[96_000, 0], [88_200, 1], [64_000, 2], [48_000, 3], [44_100, 4], [32_000, 5], [24_000, 6], [22_050, 7], [16_000, 8], [12_000, 9], [11_025, 10], [8_000, 11]]);
/** raw_data_block: SCE (global gain 160, long window, max_sfb 0, no tools), then END. */
const SILENT_RAW = Buffer.from([0x01, 0x40, 0x20, 0x07]);

function adtsFrame(rateIndex: number): Buffer {
  const len = 7 + SILENT_RAW.length;
  const h = Buffer.alloc(7);
  h[0] = 0xff; h[1] = 0xf1; // sync, MPEG-4, layer 0, no CRC
  h[2] = (1 << 6) | (rateIndex << 2) | 0; // profile LC (1), rate, private 0, channel config high bit 0
  h[3] = (1 << 6) | ((len >> 11) & 0x03); // channel config 1
  h[4] = (len >> 3) & 0xff;
  h[5] = ((len & 0x07) << 5) | 0x1f; // buffer fullness 0x7FF (VBR)
  h[6] = 0xfc; // fullness low bits, one raw data block
  return Buffer.concat([h, SILENT_RAW]);
}

export class SilentAacEncoder {
  private started = false;
  private samples = 0;
  private frames = 0;
  private readonly rateIndex: number;
  private readonly frame: Buffer;

  constructor(private readonly sampleRate: number, private readonly tags: Readonly<Record<string, string>> = {}) {
    const idx = RATE_INDEX.get(sampleRate);
    if (idx === undefined) throw new Error(`AAC has no sampling frequency index for ${sampleRate} Hz`);
    this.rateIndex = idx;
    this.frame = adtsFrame(idx);
  }

  push(inputSamples: number): Buffer {
    const out: Buffer[] = [];
    if (!this.started) { this.started = true; out.push(id3v2(this.tags)); }
    this.samples += inputSamples;
    const due = Math.floor(this.samples / 1024);
    while (this.frames < due) { out.push(this.frame); this.frames++; }
    return Buffer.concat(out);
  }

  end(): Buffer {
    const out = [this.push(0)];
    if (this.frames * 1024 < this.samples) { out.push(this.frame); this.frames++; }
    return Buffer.concat(out);
  }
}

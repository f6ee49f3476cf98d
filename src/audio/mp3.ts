// MP3 from S16LE mono PCM with @breezystack/lamejs (pure JavaScript LAME, no install script); an ID3v2 tag in front carries text.
import { Mp3Encoder as Lame } from '@breezystack/lamejs';
import { id3v2 } from './tags.js';

/** MP3 frames hold 1152 samples (576 at 24 kHz and below); LAME buffers and pads, so the stream is a little longer than its PCM. */
export class Mp3Encoder {
  private readonly lame: Lame;
  private started = false;

  constructor(sampleRate: number, kbps = 64, private readonly tags: Readonly<Record<string, string>> = {}) {
    this.lame = new Lame(1, sampleRate, kbps);
  }

  push(samples: Int16Array): Buffer {
    const out: Buffer[] = [];
    if (!this.started) { this.started = true; out.push(id3v2(this.tags)); }
    if (samples.length > 0) out.push(Buffer.from(this.lame.encodeBuffer(samples)));
    return Buffer.concat(out);
  }

  end(): Buffer {
    return Buffer.concat([this.push(new Int16Array(0)), Buffer.from(this.lame.flush())]);
  }
}

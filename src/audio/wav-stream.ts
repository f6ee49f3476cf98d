// Reads a WAV stream read by read: its header gives the rate, and its samples go on to an encoder made for that rate.
import type { AudioEncoder } from './index.js';

/** A header larger than this is not a speech WAV (its chunks before `data` are a few dozen bytes). */
const MAX_HEADER = 64 * 1024;

/**
 * An encoder fed a WAV file (S16LE mono, as OpenAI-compatible speech servers write it): the header
 * is read across reads, then `make(rate)` gets the samples of the `data` chunk. A size of 0 or
 * 0xFFFFFFFF (streamed) means to the end. Anything but 16-bit mono PCM throws (the stream breaks).
 */
export function fromWav(make: (rate: number) => AudioEncoder): AudioEncoder {
  let head: Buffer | undefined = Buffer.alloc(0);
  let inner: AudioEncoder | undefined;
  let left = Infinity;
  const body = (b: Buffer): Buffer => {
    const take = b.subarray(0, Math.min(b.length, left));
    left -= take.length;
    return take.length > 0 ? inner!.push(take) : Buffer.alloc(0);
  };
  return {
    push(chunk) {
      if (!head) return body(chunk);
      head = Buffer.concat([head, chunk]);
      const found = dataStart(head);
      if (found === undefined) {
        if (head.length > MAX_HEADER) throw new Error('the upstream sent a WAV whose header never reached its data');
        return Buffer.alloc(0);
      }
      inner = make(found.rate);
      if (found.size !== 0 && found.size < 0xffffffff - 64) left = found.size;
      const rest = head.subarray(found.offset);
      head = undefined;
      return body(rest);
    },
    end() {
      if (!inner) throw new Error('the upstream sent a WAV without data');
      return inner.end();
    },
    close() { inner?.close?.(); },
  };
}

/** Where the samples start, their rate and declared size, once the header up to `data` is in `b`. */
function dataStart(b: Buffer): { offset: number; rate: number; size: number } | undefined {
  if (b.length < 12) return undefined;
  if (b.toString('latin1', 0, 4) !== 'RIFF' || b.toString('latin1', 8, 12) !== 'WAVE') throw new Error('the upstream sent something that is not a WAV');
  let rate: number | undefined;
  for (let p = 12; p + 8 <= b.length;) {
    const id = b.toString('latin1', p, p + 4);
    const size = b.readUInt32LE(p + 4);
    if (id === 'data') {
      if (rate === undefined) throw new Error('the upstream sent a WAV without a fmt chunk before its data');
      return { offset: p + 8, rate, size };
    }
    if (p + 8 + size > b.length) return undefined;
    if (id === 'fmt ') {
      const format = b.readUInt16LE(p + 8);
      const channels = b.readUInt16LE(p + 10);
      const bits = b.readUInt16LE(p + 22);
      if ((format !== 1 && format !== 0xfffe) || channels !== 1 || bits !== 16) {
        throw new Error(`the upstream sent a WAV of ${channels} channel(s), ${bits}-bit, format ${format}: only 16-bit mono PCM is read`);
      }
      rate = b.readUInt32LE(p + 12);
    }
    p += 8 + size + (size & 1);
  }
  return undefined;
}

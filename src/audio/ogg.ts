// The Ogg container (RFC 3533) as Ogg Opus uses it (RFC 7845): CRC'd pages of whole packets, OpusHead and OpusTags.
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

export function crc32(buf: Buffer): number {
  let c = 0;
  for (const b of buf) c = ((c << 8) ^ CRC[((c >>> 24) ^ b) & 0xff]!) >>> 0;
  return c >>> 0;
}

const SERIAL = 0x546f6c6c; // 'Toll'
/** Lacing values one page holds (RFC 3533: the segment table is at most 255 entries). */
const MAX_SEGMENTS = 255;

/** Lacing values of one packet: 255 per full segment, then the rest (0 when it is a multiple of 255). */
function segments(p: Buffer): number {
  return Math.floor(p.length / 255) + 1;
}

/** One page of whole packets; `granule` is the position after its last packet. */
function page(packets: readonly Buffer[], granule: bigint, seq: number, flags: number): Buffer {
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

/** A packet and the granule position once it is decoded. */
export interface Packet { data: Buffer; granule: bigint }

/** Writes one logical Ogg stream page by page: the first page opens it (BOS), `last` closes it (EOS). */
export class OggWriter {
  private seq = 0;

  /** A page holding only this packet (the header packets each have their own page). */
  header(packet: Buffer): Buffer {
    return page([packet], 0n, this.seq, this.seq++ === 0 ? 0x02 : 0);
  }

  /**
   * Pages for these packets, as few as the segment limit allows, each with the granule of its last
   * packet; with `last`, the final page is the end of the stream (it must hold at least one packet).
   */
  pages(packets: readonly Packet[], last = false): Buffer {
    const out: Buffer[] = [];
    let from = 0;
    while (from < packets.length) {
      let to = from;
      let segs = 0;
      while (to < packets.length && segs + segments(packets[to]!.data) <= MAX_SEGMENTS) segs += segments(packets[to++]!.data);
      if (to === from) to++; // a packet longer than one page (~64 KB) cannot occur here: Opus packets are at most 1,275 bytes per frame
      const eos = last && to === packets.length;
      out.push(page(packets.slice(from, to).map((p) => p.data), packets[to - 1]!.granule, this.seq++, eos ? 0x04 : 0));
      from = to;
    }
    return Buffer.concat(out);
  }
}

/** RFC 7845 §5.1: version 1, mono, the pre-skip (48 kHz samples the decoder drops), the input's rate, gain 0, mapping family 0. */
export function opusHead(preSkip: number, inputRate: number): Buffer {
  const head = Buffer.alloc(19);
  head.write('OpusHead', 0, 'latin1'); head[8] = 1; head[9] = 1; head.writeUInt16LE(preSkip, 10);
  head.writeUInt32LE(inputRate, 12); head.writeInt16LE(0, 16); head[18] = 0;
  return head;
}

/** RFC 7845 §5.2: the vendor string and the user comments. */
export function opusTags(vendor: string, tags: Readonly<Record<string, string>>): Buffer {
  return Buffer.concat([Buffer.from('OpusTags', 'latin1'), vorbisComment(vendor, tags)]);
}

// Ogg Opus length as the sum of its packets' durations, each read from the packet's TOC byte (RFC 6716 §3.1); no page's granule position is believed.
import { crc32 } from '../../audio/ogg.js';
import type { Counted } from './types.js';

/** 48 kHz samples of one frame, by the TOC's configuration number (SILK 10/20/40/60 ms, hybrid 10/20 ms, CELT 2.5/5/10/20 ms). */
function frameSamples(config: number): number {
  if (config < 12) return [480, 960, 1920, 2880][config % 4]!;
  if (config < 16) return [480, 960][config % 2]!;
  return [120, 240, 480, 960][config % 4]!;
}

/** Samples (48 kHz) an Opus packet decodes to; 0 for an empty or malformed one (a decoder rejects it). */
export function opusPacketSamples(pkt: Buffer): number {
  if (pkt.length === 0) return 0;
  const code = pkt[0]! & 3;
  const frames = code === 0 ? 1 : code < 3 ? 2 : pkt.length >= 2 ? pkt[1]! & 0x3f : 0;
  const samples = frames * frameSamples(pkt[0]! >> 3);
  return samples <= 5760 ? samples : 0; // at most 120 ms a packet
}

interface Stream { opus: boolean; packets: number; partial: Buffer[] }

/**
 * Reads every page whose CRC holds, joins its segments into packets per logical stream, and sums the
 * audio packets of each Opus stream (the first two, OpusHead and OpusTags, are headers). Bytes of pages
 * that do not parse or whose CRC fails are `uncovered`. Undefined when a stream is not Opus (Vorbis,
 * FLAC in Ogg, Speex): those are decoded to be measured.
 */
export function oggOpusLength(d: Buffer): Counted | undefined {
  const streams = new Map<number, Stream>();
  let samples = 0;
  let uncovered = 0;
  let channels = 1;
  let p = 0;
  while (p < d.length) {
    const page = pageAt(d, p);
    if (!page) { p++; uncovered++; continue; }
    const { serial, flags, lacing, body } = page;
    let s = streams.get(serial);
    if (!s) {
      if (!(flags & 0x02)) { p += page.length; uncovered += page.length; continue; } // a stream must open with its BOS page
      s = { opus: false, packets: 0, partial: [] };
      streams.set(serial, s);
    }
    if (!(flags & 0x01)) s.partial = []; // not a continuation: a packet left open before is lost
    let at = body;
    for (const l of lacing) {
      s.partial.push(d.subarray(at, at + l));
      at += l;
      if (l === 255) continue;
      const pkt = s.partial.length === 1 ? s.partial[0]! : Buffer.concat(s.partial);
      s.partial = [];
      if (s.packets === 0) {
        s.opus = pkt.length >= 19 && pkt.toString('latin1', 0, 8) === 'OpusHead';
        if (!s.opus) return undefined;
        channels = pkt[9]!;
      } else if (s.packets >= 2) samples += opusPacketSamples(pkt);
      s.packets++;
    }
    p += page.length;
  }
  if (streams.size === 0 || samples === 0) return undefined;
  return { seconds: samples / 48_000, uncovered, container: 'Ogg', codec: 'Opus', sampleRate: 48_000, channels };
}

/** The page at `p` when it is whole and its CRC holds. */
function pageAt(d: Buffer, p: number): { length: number; serial: number; flags: number; lacing: Buffer; body: number } | undefined {
  if (p + 27 > d.length || d[p] !== 0x4f || d.toString('latin1', p, p + 4) !== 'OggS' || d[p + 4] !== 0) return undefined;
  const nseg = d[p + 26]!;
  const body = p + 27 + nseg;
  if (body > d.length) return undefined;
  const lacing = d.subarray(p + 27, body);
  let size = 0;
  for (const l of lacing) size += l;
  if (body + size > d.length) return undefined;
  const page = Buffer.from(d.subarray(p, body + size));
  const want = page.readUInt32LE(22);
  page.writeUInt32LE(0, 22);
  if (crc32(page) !== want) return undefined;
  return { length: body + size - p, serial: d.readUInt32LE(p + 14), flags: d[p + 5]!, lacing, body };
}

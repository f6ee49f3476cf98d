// Text tags in audio containers: ID3v2.4 TXXX frames (MP3, ADTS AAC) and Vorbis comments (FLAC, Ogg Opus).

function syncsafe(n: number): Buffer {
  return Buffer.from([(n >> 21) & 0x7f, (n >> 14) & 0x7f, (n >> 7) & 0x7f, n & 0x7f]);
}

/** An ID3v2.4 tag with one TXXX (user text, UTF-8) frame per entry; empty when there are none. */
export function id3v2(tags: Readonly<Record<string, string>>): Buffer {
  const frames = Object.entries(tags).map(([k, v]) => {
    const body = Buffer.concat([Buffer.from([3]), Buffer.from(k, 'utf8'), Buffer.from([0]), Buffer.from(v, 'utf8')]);
    return Buffer.concat([Buffer.from('TXXX', 'latin1'), syncsafe(body.length), Buffer.from([0, 0]), body]);
  });
  if (frames.length === 0) return Buffer.alloc(0);
  const all = Buffer.concat(frames);
  return Buffer.concat([Buffer.from('ID3', 'latin1'), Buffer.from([4, 0, 0]), syncsafe(all.length), all]);
}

/** A Vorbis comment list (no framing bit): vendor, then KEY=value entries. */
export function vorbisComment(vendor: string, tags: Readonly<Record<string, string>>): Buffer {
  const parts: Buffer[] = [];
  const str = (s: string) => { const b = Buffer.from(s, 'utf8'); const l = Buffer.alloc(4); l.writeUInt32LE(b.length); parts.push(l, b); };
  str(vendor);
  const entries = Object.entries(tags);
  const n = Buffer.alloc(4); n.writeUInt32LE(entries.length); parts.push(n);
  for (const [k, v] of entries) str(`${k.toUpperCase()}=${v}`);
  return Buffer.concat(parts);
}

// Reading what a client received: Ogg pages (RFC 3533) and the seconds ffmpeg decodes from a file.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const hasFfmpeg = (() => { try { execFileSync('ffprobe', ['-version'], { stdio: 'ignore' }); return true; } catch { return false; } })();

/** The pages of an Ogg stream: flags (2 BOS, 4 EOS), granule position, serial number, sequence number. */
export function oggPages(buf) {
  const pages = [];
  for (let p = 0; p + 27 <= buf.length;) {
    if (buf.toString('latin1', p, p + 4) !== 'OggS') throw new Error(`no Ogg page at byte ${p}`);
    const n = buf[p + 26];
    let body = 0;
    for (let i = 0; i < n; i++) body += buf[p + 27 + i];
    pages.push({ flags: buf[p + 5], granule: buf.readBigInt64LE(p + 6), serial: buf.readUInt32LE(p + 14), seq: buf.readUInt32LE(p + 18) });
    p += 27 + n + body;
  }
  return pages;
}

/**
 * What ffprobe says of a file (container, codec, its duration), and the seconds ffmpeg decodes from it
 * (`-v error`: a decoding error throws). `raw` is the demuxer options of a headerless format (`['-f', 'mulaw', ...]`).
 */
export function probeAudio(buf, ext, raw = []) {
  const dir = mkdtempSync(join(tmpdir(), 'tg-probe-'));
  try {
    const f = join(dir, `a.${ext}`);
    writeFileSync(f, buf);
    const out = JSON.parse(execFileSync('ffprobe', ['-v', 'error', ...raw, '-show_entries', 'format=format_name,duration:stream=codec_name,sample_rate,channels', '-of', 'json', f]).toString());
    const pcm = execFileSync('ffmpeg', ['-v', 'error', ...raw, '-i', f, '-f', 's16le', '-ac', '1', '-ar', '48000', '-'], { maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'pipe'] });
    let peak = 0;
    for (let i = 0; i + 1 < pcm.length; i += 2) peak = Math.max(peak, Math.abs(pcm.readInt16LE(i)));
    return { format: out.format.format_name, duration: Number(out.format.duration), codec: out.streams[0]?.codec_name, rate: Number(out.streams[0]?.sample_rate),
      decodedSeconds: pcm.length / 2 / 48_000, peak };
  } finally { rmSync(dir, { recursive: true, force: true }); }
}

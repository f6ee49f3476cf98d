// A 60 s tone in each container ffmpeg makes, and the same files with their length headers patched to lie (tiny or huge), or cut short.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 } from '../../dist/audio/ogg.js';

/** The containers, each with ffmpeg's arguments, how long one of its frames lasts (s), and the encoder's priming (s) a frame count includes. */
export const CONTAINERS = {
  mp3: { ext: 'mp3', args: ['-c:a', 'libmp3lame', '-b:a', '64k'], frame: 1152 / 44_100, priming: 1105 / 44_100 },
  mp3_8k: { ext: 'mp3', args: ['-ar', '8000', '-c:a', 'libmp3lame', '-b:a', '8k'], frame: 576 / 8_000, priming: 1105 / 8_000 },
  opus: { ext: 'ogg', args: ['-c:a', 'libopus', '-b:a', '24k', '-f', 'ogg'], frame: 0.02 },
  vorbis: { ext: 'ogg', args: ['-c:a', 'libvorbis', '-f', 'ogg'], frame: 2048 / 44_100 },
  flac: { ext: 'flac', args: ['-c:a', 'flac'], frame: 4608 / 44_100 },
  webm: { ext: 'webm', args: ['-c:a', 'libopus', '-b:a', '24k'], frame: 0.02 },
  m4a: { ext: 'm4a', args: ['-c:a', 'aac', '-b:a', '32k', '-movflags', '+faststart'], frame: 1024 / 44_100 },
  wav: { ext: 'wav', args: ['-c:a', 'pcm_mulaw'], frame: 1 / 44_100 },
};

/**
 * How far a frame count may be from the tone: every frame is decoded, the last one padded (a frame), the
 * first holding the encoder's priming (LAME 1,105 samples; AAC 1,024 and Opus 312 are under a frame),
 * which a gapless player trims by the LAME tag but the decoder still decodes; plus a frame of rounding.
 */
export function tolerance(name) {
  return 2 * CONTAINERS[name].frame + (CONTAINERS[name].priming ?? 0) + 0.001;
}

/** Makes every fixture in a temporary directory (removed by `cleanup`). */
export function makeFixtures() {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-audio-length-'));
  const files = {};
  for (const [name, c] of Object.entries(CONTAINERS)) {
    const out = join(dir, `${name}.${c.ext}`);
    execFileSync('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'sine=frequency=440:duration=60:sample_rate=44100', ...c.args, out]);
    files[name] = readFileSync(out);
  }
  return { files, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Seconds ffmpeg decodes from these bytes (an independent count: its PCM output's length). */
export function decodedSeconds(data) {
  const pcm = execFileSync('ffmpeg', ['-hide_banner', '-loglevel', 'quiet', '-i', 'pipe:0', '-vn', '-f', 's16le', '-ac', '1', '-ar', '48000', 'pipe:1'],
    { input: data, maxBuffer: 1 << 28 });
  return pcm.length / 96_000;
}

/** The same bytes with the container's length header set to `seconds` (0.7 for a tiny lie, 10^6 for a huge one). */
export function lie(name, data, seconds) {
  const d = Buffer.from(data);
  const huge = seconds > 1000;
  switch (name) {
    case 'mp3': case 'mp3_8k': {
      // the Xing/Info frame's frame count
      let at = d.indexOf('Info');
      if (at < 0 || at > 4096) at = d.indexOf('Xing');
      if (!(d.readUInt32BE(at + 4) & 1)) throw new Error('no frame count in the Info frame');
      const spf = name === 'mp3' ? 1152 : 576;
      const rate = name === 'mp3' ? 44_100 : 8_000;
      d.writeUInt32BE(huge ? 10_000_000 : Math.round((seconds * rate) / spf), at + 8);
      return d;
    }
    case 'opus': case 'vorbis': {
      // the last page's granule position, its CRC made right again
      const at = d.lastIndexOf('OggS');
      const rate = name === 'opus' ? 48_000 : 44_100;
      d.writeBigUInt64LE(BigInt(Math.round(seconds * rate) + (name === 'opus' ? 312 : 0)), at + 6);
      d.writeUInt32LE(0, at + 22);
      d.writeUInt32LE(crc32(d.subarray(at)), at + 22);
      return d;
    }
    case 'flac': {
      // STREAMINFO's 36-bit total samples (bytes 21–25 of the file)
      const total = BigInt(Math.round(seconds * 44_100));
      d[21] = (d[21] & 0xf0) | Number((total >> 32n) & 0x0fn);
      d.writeUInt32BE(Number(total & 0xffffffffn), 22);
      return d;
    }
    case 'webm': {
      // Segment Info's Duration (ms at the default timecode scale), an 8-byte float
      const at = d.indexOf(Buffer.from([0x44, 0x89, 0x88]));
      if (at < 0) throw new Error('no Duration element');
      d.writeDoubleBE(seconds * 1000, at + 3);
      return d;
    }
    case 'm4a': {
      // mvhd, tkhd and mdhd durations (version 0 boxes), each in its own time scale
      const mvhd = d.indexOf('mvhd');
      const mdhd = d.indexOf('mdhd');
      const tkhd = d.indexOf('tkhd');
      const movieScale = d.readUInt32BE(mvhd + 16);
      const mediaScale = d.readUInt32BE(mdhd + 16);
      const dur = (scale) => Math.min(0xfffffff0, Math.round(seconds * scale));
      d.writeUInt32BE(dur(movieScale), mvhd + 20);
      d.writeUInt32BE(dur(movieScale), tkhd + 24);
      d.writeUInt32BE(dur(mediaScale), mdhd + 20);
      return d;
    }
    case 'wav': {
      // the fact chunk's sample count
      const at = d.indexOf('fact');
      if (at < 0) throw new Error('no fact chunk');
      d.writeUInt32LE(Math.min(0xfffffff0, Math.round(seconds * 44_100)), at + 8);
      return d;
    }
    default: throw new Error(`no lie for ${name}`);
  }
}

/** The first `fraction` of the file: what a cut-off upload holds (its header still says 60 s). */
export function truncated(data, fraction = 0.05) {
  return data.subarray(0, Math.floor(data.length * fraction));
}

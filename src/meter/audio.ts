// The duration of uploaded audio, read by Tollgate from the file's own container (never a client's number): what speech input is billed by.
import { parseBuffer } from 'music-metadata';
import { GatewayError } from '../errors.js';

export interface AudioInfo {
  /** Whole milliseconds, rounded up: what is billed. */
  durationMs: number;
  /** The container as read (`WAVE`, `MPEG`, `Ogg`, `FLAC`, …). */
  container: string;
  codec: string | undefined;
  sampleRate: number | undefined;
  channels: number | undefined;
}

export function invalidAudio(message: string, param = 'file'): GatewayError {
  return new GatewayError({ status: 400, code: 'invalid_audio', param, message });
}

/**
 * Reads the audio's duration from its container (WAV, MP3, Ogg/Opus, FLAC, M4A/AAC, WebM, …). A file
 * whose duration cannot be read is refused with 400 `invalid_audio`, before anything is held or sent
 * upstream: it bills nothing.
 */
export async function measureAudio(data: Buffer, opts: { mimeType?: string; filename?: string; param?: string; use?: 'billed' | 'voice_sample' } = {}): Promise<AudioInfo> {
  const param = opts.param ?? 'file';
  // A voice sample is measured to be kept, not to be billed (adding a voice is free): the error says so.
  const unusable = opts.use === 'voice_sample' ? 'so it cannot be used as a voice sample' : 'so it cannot be billed';
  if (data.length === 0) throw invalidAudio('The audio file is empty.', param);
  let meta;
  try {
    // The bytes decide the container; the client's type and name are a hint only when the bytes cannot tell.
    meta = await parseBuffer(data, { size: data.length }, { duration: true, skipCovers: true })
      .catch(() => parseBuffer(data, { mimeType: opts.mimeType, path: opts.filename, size: data.length }, { duration: true, skipCovers: true }));
  } catch (e) {
    throw invalidAudio(`The audio file cannot be read: ${String((e as Error)?.message ?? e).slice(0, 200)}. Send WAV, MP3, Ogg/Opus, FLAC, M4A or WebM.`, param);
  }
  // music-metadata estimates an ADTS stream's duration from its first frames' bit rate (0.94 s for a 1.5 s
  // stream of small frames): count its frames instead, 1024 samples per raw data block.
  // It also fails to recognise some ADTS streams (8 kHz, no tag) from their bytes alone.
  const adts = !meta.format.container || meta.format.container.startsWith('ADTS') ? adtsSeconds(data) : undefined;
  const container = adts !== undefined ? 'ADTS/MPEG-4' : meta.format.container;
  const seconds = adts ?? meta.format.duration;
  if (seconds === undefined || !Number.isFinite(seconds) || seconds <= 0) {
    throw invalidAudio(`The duration of this ${container ?? 'unrecognised'} audio cannot be read from the file, ${unusable}; send WAV, MP3, Ogg/Opus, FLAC, M4A or WebM.`, param);
  }
  return {
    durationMs: Math.ceil(seconds * 1000), container: container ?? 'unknown', codec: meta.format.codec,
    sampleRate: meta.format.sampleRate, channels: meta.format.numberOfChannels,
  };
}

/** Raw 16-bit PCM has no container: its duration follows from its length, sample rate and channels. */
export function pcmDurationMs(bytes: number, sampleRate: number, channels = 1): number {
  return Math.ceil((bytes / (2 * channels) / sampleRate) * 1000);
}

const ADTS_RATES = [96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025, 8_000, 7_350];

/** The duration of an ADTS (raw AAC) stream from its frame headers, after any ID3v2 tag; undefined if they do not chain. */
export function adtsSeconds(data: Buffer): number | undefined {
  let p = 0;
  if (data.length >= 10 && data.toString('latin1', 0, 3) === 'ID3') {
    p = 10 + (((data[6]! & 0x7f) << 21) | ((data[7]! & 0x7f) << 14) | ((data[8]! & 0x7f) << 7) | (data[9]! & 0x7f));
  }
  let samples = 0;
  let rate = 0;
  while (p + 7 <= data.length) {
    if (data[p] !== 0xff || (data[p + 1]! & 0xf6) !== 0xf0) return undefined;
    const r = ADTS_RATES[(data[p + 2]! >> 2) & 0x0f];
    const len = ((data[p + 3]! & 0x03) << 11) | (data[p + 4]! << 3) | (data[p + 5]! >> 5);
    if (r === undefined || len < 7) return undefined;
    rate = r;
    samples += 1024 * ((data[p + 6]! & 0x03) + 1);
    p += len;
  }
  return rate > 0 ? samples / rate : undefined;
}

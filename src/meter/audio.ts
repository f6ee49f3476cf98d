// The duration of uploaded audio, measured by Tollgate from the audio itself (never a client's number, never a container's header): what speech input is billed by.
import { GatewayError } from '../errors.js';
import type { Ffmpeg } from '../audio/ffmpeg.js';
import type { Counted } from './audio-length/types.js';
import { wavLength } from './audio-length/wav.js';
import { adtsFrame, adtsLength, id3Length, mpegFrame, mpegLength } from './audio-length/mpeg.js';
import { flacLength } from './audio-length/flac.js';
import { oggOpusLength } from './audio-length/ogg.js';

export interface AudioInfo {
  /** Whole milliseconds, rounded up: what is billed. */
  durationMs: number;
  /** The container as read (`WAVE`, `MPEG`, `ADTS/MPEG-4`, `Ogg`, `FLAC`, or ffmpeg's demuxer name). */
  container: string;
  codec: string | undefined;
  sampleRate: number | undefined;
  channels: number | undefined;
  /** How it was measured: frames counted in the bytes, or samples decoded by ffmpeg. */
  method: 'frames' | 'decoded';
}

export interface MeasureOptions {
  /** The multipart field named in a refusal. */
  param?: string;
  /** Decodes what the frame counters do not read (WebM, MP4, Ogg Vorbis, …); without it those are refused. */
  ffmpeg?: Ffmpeg | undefined;
  /** What the length is for: a voice sample is measured to be kept, not billed (adding a voice is free), and a refusal says so. */
  use?: 'billed' | 'voice_sample';
}

/** What the frame counters read without ffmpeg, for refusals. */
export const COUNTED_FORMATS = 'WAV (PCM, float, G.711), MP3, AAC in ADTS, FLAC or Ogg Opus';

export function invalidAudio(message: string, param = 'file'): GatewayError {
  return new GatewayError({ code: 'invalid_audio', param, message });
}

/** Bytes a frame walk may leave unplaced and still be believed (a truncated last frame, stray bytes); beyond that the file is decoded. */
function slack(size: number): number {
  return 16 * 1024 + Math.floor(size / 100);
}

/** The frame counter for these bytes, chosen by their first bytes (never by the client's type or name). */
export function countFrames(data: Buffer): Counted | undefined {
  if (data.toString('latin1', 0, 4) === 'RIFF') return wavLength(data);
  if (data.toString('latin1', 0, 4) === 'OggS') return oggOpusLength(data);
  const start = id3Length(data, 0);
  if (data.toString('latin1', start, start + 4) === 'fLaC') return flacLength(data);
  if (mpegFrame(data, start)) return mpegLength(data);
  if (adtsFrame(data, start)) return adtsLength(data);
  return undefined;
}

/**
 * The audio's duration as a decoder gets it: WAV's data bytes present, or the frames of MP3, ADTS,
 * FLAC and Ogg Opus counted one by one through the bytes (a header's total — Xing, STREAMINFO, the last
 * granule, `fact` — is never read); anything else (WebM, MP4, Ogg Vorbis, a walk that left bytes it
 * could not place) is decoded by ffmpeg and its samples counted. A file that cannot be measured is
 * refused with 400 `invalid_audio` before anything is held or sent upstream: it bills nothing.
 */
export async function measureAudio(data: Buffer, opts: MeasureOptions = {}): Promise<AudioInfo> {
  const param = opts.param ?? 'file';
  // A voice sample is measured to be kept, not to be billed (adding a voice is free): the error says so.
  const unusable = opts.use === 'voice_sample' ? 'so it cannot be used as a voice sample' : 'so it cannot be billed';
  if (data.length === 0) throw invalidAudio('The audio file is empty.', param);
  const counted = countFrames(data);
  if (counted && counted.uncovered <= slack(data.length) && counted.seconds > 0) {
    return { durationMs: Math.ceil(counted.seconds * 1000), container: counted.container, codec: counted.codec, sampleRate: counted.sampleRate, channels: counted.channels, method: 'frames' };
  }
  if (!opts.ffmpeg) {
    throw invalidAudio(`The length of this audio can be measured only by decoding it, and this gateway has no decoder (ffmpeg); send ${COUNTED_FORMATS}.`, param);
  }
  const decoded = await opts.ffmpeg.decodedLength(data);
  if (!decoded || !(decoded.seconds > 0)) {
    throw invalidAudio(`The audio file cannot be decoded, so its length cannot be measured, ${unusable}; send ${COUNTED_FORMATS}, M4A or WebM.`, param);
  }
  return { durationMs: Math.ceil(decoded.seconds * 1000), container: decoded.container, codec: undefined, sampleRate: undefined, channels: undefined, method: 'decoded' };
}

/** Raw 16-bit PCM has no container: its duration follows from its length, sample rate and channels. */
export function pcmDurationMs(bytes: number, sampleRate: number, channels = 1): number {
  return Math.ceil((bytes / (2 * channels) / sampleRate) * 1000);
}

/** The container these bytes are recognisably in, by their first bytes (a frame chain covering most of them for MP3 and ADTS); undefined for raw samples. */
export function containerOf(data: Buffer): string | undefined {
  const magic = data.toString('latin1', 0, 4);
  const named: Readonly<Record<string, string>> = { RIFF: 'WAV (RIFF)', OggS: 'Ogg', fLaC: 'FLAC', 'FORM': 'AIFF', caff: 'CAF', '#!AM': 'AMR', '\x1aE\xdf\xa3': 'WebM/Matroska' };
  if (named[magic]) return named[magic];
  if (data.toString('latin1', 4, 8) === 'ftyp') return 'MP4/M4A';
  if (data.toString('latin1', 0, 3) === 'ID3') return 'MP3 (ID3-tagged)';
  const counted = mpegFrame(data, 0) ? mpegLength(data) : adtsFrame(data, 0) ? adtsLength(data) : undefined;
  if (counted && counted.uncovered < data.length / 2) return counted.container === 'MPEG' ? 'MP3' : 'AAC (ADTS)';
  return undefined;
}

/**
 * Raw 16 kHz 16-bit mono PCM as the beta family's `file_format=pcm_s16le_16` declares it: refused with
 * 422 naming the container when the bytes are recognisably a container (they would not be decoded as
 * what was billed); else its length is its duration.
 */
export function measureRawPcm(data: Buffer, param: string, fileFormatError: (message: string) => GatewayError): AudioInfo {
  if (data.length < 2) throw invalidAudio('The audio file holds no 16-bit sample.', param);
  const container = containerOf(data);
  if (container) {
    throw fileFormatError(`file_format is pcm_s16le_16 (raw 16 kHz 16-bit mono PCM), but the file is ${container}; leave file_format out (or send other) for a file in a container.`);
  }
  return { durationMs: pcmDurationMs(data.length, 16_000), container: 'raw', codec: 'pcm_s16le', sampleRate: 16_000, channels: 1, method: 'frames' };
}

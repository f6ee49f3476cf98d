// How /alpha/v1/audio/speech gets the client's response_format from an upstream's speech capabilities: the upstream's own, made by src/audio from its pcm or wav, or converted by ffmpeg.
import type { IncomingMessage } from 'node:http';
import type { SpeechCaps, SpeechFormat } from '../../config.js';
import { GatewayError } from '../../errors.js';
import { audioEncoder, fromWav, type AudioEncoder } from '../../audio/index.js';
import type { Ffmpeg, ConvertedReply } from '../../audio/ffmpeg.js';
import { log } from '../../observe/log.js';

/** OpenAI's speech is 24 kHz mono in every format; what Tollgate makes is too. */
const OUT_RATE = 24_000;
/** The formats src/audio makes for real from PCM (its aac is silent: never served). */
const MADE_HERE: readonly SpeechFormat[] = ['pcm', 'wav', 'flac', 'mp3', 'opus'];

export type SpeechPlan =
  /** The upstream makes the format: the request passes on and the reply through, unchanged. */
  | { kind: 'upstream' }
  /** The upstream is asked for `from` and src/audio makes the format from it, read by read. */
  | { kind: 'encode'; from: 'pcm' | 'wav'; encoder(): AudioEncoder }
  /** The upstream is asked for `from` and ffmpeg converts its reply. */
  | { kind: 'ffmpeg'; from: SpeechFormat; convert(res: IncomingMessage, requestId: string): ConvertedReply };

/** What a client can have from this upstream: its own formats, those made here from its pcm or wav, those ffmpeg makes. */
export function availableFormats(caps: SpeechCaps, ffmpeg: Ffmpeg | undefined): SpeechFormat[] {
  const raw = caps.formats.includes('pcm') || caps.formats.includes('wav');
  const all = new Set<SpeechFormat>([...caps.formats, ...(raw ? MADE_HERE : []), ...(ffmpeg ? ffmpeg.formats : [])]);
  return (['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const).filter((f) => all.has(f));
}

export function speechPlan(format: SpeechFormat, caps: SpeechCaps, ffmpeg: Ffmpeg | undefined, sse: boolean): SpeechPlan {
  // OpenAI's pcm is 24 kHz: an upstream's pcm at another rate is resampled, never passed on as if it were
  if (caps.formats.includes(format) && !(format === 'pcm' && caps.pcmRate !== OUT_RATE)) return { kind: 'upstream' };
  const refuse = (why: string): never => {
    throw new GatewayError({ code: 'invalid_value', param: 'response_format',
      message: `response_format '${format}' is not available for this model: ${why} Available: ${availableFormats(caps, ffmpeg).map((f) => `'${f}'`).join(', ')}.` });
  };
  if (sse) {
    throw new GatewayError({ code: 'invalid_value', param: 'stream_format',
      message: `stream_format 'sse' is not available with response_format '${format}' for this model: its host does not make ${format}, and this gateway converts plain audio streams only. Use stream_format 'audio', or one of: ${caps.formats.map((f) => `'${f}'`).join(', ')}.` });
  }
  const raw = caps.formats.includes('pcm') ? 'pcm' : caps.formats.includes('wav') ? 'wav' : undefined;
  if (raw && MADE_HERE.includes(format)) {
    const codec = format;
    const make = (rate: number): AudioEncoder => audioEncoder(codec, { inRate: rate, outRate: OUT_RATE });
    return { kind: 'encode', from: raw, encoder: raw === 'pcm' ? () => make(caps.pcmRate) : () => fromWav(make) };
  }
  if (!ffmpeg) return refuse(`its host makes only ${caps.formats.join(', ')}, and this gateway makes ${format} only with ffmpeg, which is not installed.`);
  if (!ffmpeg.formats.includes(format)) return refuse(`its host makes only ${caps.formats.join(', ')}, and this gateway's ffmpeg has no ${format} encoder.`);
  const from = raw ?? caps.formats[0]!;
  return {
    kind: 'ffmpeg', from,
    convert: (res, requestId) => ffmpeg.convert(res, { from, fromRate: caps.pcmRate, to: format, toRate: OUT_RATE },
      (detail) => log('warn', 'ffmpeg conversion failed', { request_id: requestId, detail })),
  };
}

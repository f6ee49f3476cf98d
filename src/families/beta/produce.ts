// How each output_format is produced from what the speech contract returns: the upstream is asked for PCM (or WAV, when it makes no pcm) at its own rate, and Tollgate resamples and encodes with src/audio.
import { GatewayError } from '../../errors.js';
import type { SpeechCaps } from '../../config.js';
import { formatSpec, type OutputFormat } from './schemas.js';
import { IDENTITY, type AudioEncoder } from '../../meter/synthesis.js';
import { audioEncoder, fromWav, pieceStream, type Codec, type PieceStream } from '../../audio/index.js';

/** The rate of the PCM an OpenAI-compatible `/v1/audio/speech` returns for `response_format: pcm` (a host's own is in its config). */
export const UPSTREAM_PCM_RATE = 24_000;

/** What the speech contract promises when an upstream's config says nothing (and what the conversion contract always returns). */
export const CONTRACT_SPEECH: SpeechCaps = { formats: ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'], pcmRate: UPSTREAM_PCM_RATE };

export interface Production {
  /** What the upstream is asked for. */
  upstreamFormat: 'pcm' | 'wav';
  /** The rate of the upstream's pcm (its audio's duration is the PCM's bytes / 2 / this). */
  pcmRate: number;
  contentType: string;
  encoder(): AudioEncoder;
  /** One socket's (one context's) encoders, a generation each, making one stream (src/audio pieceStream: Opus is one Ogg stream). */
  stream(): GenerationStream;
}

/** The encoders of one stream-input socket's (or context's) generations; `close` once it has ended. */
export interface GenerationStream { generation(): AudioEncoder; close(): void }

/**
 * The plan for one output format on an upstream that makes `caps`: its pcm at its own rate (resampled
 * to the format's rate, so Piper's 22.05 kHz is not played at 24 kHz), else its WAV (the rate read from
 * the header); an upstream that makes neither cannot serve the family (400, naming what it makes).
 * `whole`: the reply is one file, not a stream (a WAV's header then states the real size).
 */
export function production(f: OutputFormat, caps: SpeechCaps = CONTRACT_SPEECH, whole = false): Production {
  const spec = formatSpec(f);
  const source = caps.formats.includes('pcm') ? 'pcm' : caps.formats.includes('wav') ? 'wav' : undefined;
  if (!source) {
    throw new GatewayError({ code: 'invalid_value', param: 'output_format',
      message: `output_format ${f} cannot be produced: the model's host makes only ${caps.formats.join(', ')}, and this gateway makes the family's formats from pcm or wav.` });
  }
  const codec: Codec = spec.codec;
  // Opus decodes at 48 kHz whatever it is fed: it is encoded at the upstream's rate (libopus resamples
  // better than a linear interpolator); the other codecs are written at the format's rate.
  const options = (rate: number) => ({ inRate: rate, outRate: codec === 'opus' ? rate : spec.sampleRate, kbps: spec.kbps ?? (codec === 'mp3' ? 128 : 64) });
  const make = (rate: number): AudioEncoder => (codec === 'pcm' && spec.sampleRate === rate && source === 'pcm'
    ? IDENTITY
    : audioEncoder(codec, { ...options(rate), hold: whole }));
  const stream = (): GenerationStream => {
    // one piece stream per rate the upstream's audio comes at (a WAV's header says it: the same every time)
    const streams = new Map<number, PieceStream>();
    const piece = (rate: number): AudioEncoder => {
      if (codec === 'pcm' && spec.sampleRate === rate && source === 'pcm') return IDENTITY;
      let ps = streams.get(rate);
      if (!ps) { ps = pieceStream(codec, options(rate)); streams.set(rate, ps); }
      return ps.piece();
    };
    return {
      generation: source === 'pcm' ? () => piece(caps.pcmRate) : () => fromWav(piece),
      close: () => { for (const ps of streams.values()) ps.close(); },
    };
  };
  return {
    upstreamFormat: source, pcmRate: caps.pcmRate, contentType: spec.contentType,
    encoder: source === 'pcm' ? () => make(caps.pcmRate) : () => fromWav(make),
    stream,
  };
}

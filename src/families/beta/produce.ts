// How each output_format is produced from what the speech contract returns: the upstream is asked for PCM (S16LE mono, 24 kHz, as OpenAI-compatible hosts send it) and Tollgate resamples and encodes with src/audio.
import { GatewayError } from '../../errors.js';
import { formatSpec, type OutputFormat } from './schemas.js';
import { IDENTITY, type AudioEncoder } from '../../meter/synthesis.js';
import { audioEncoder, bytes, encodeG711, int16, resample } from '../../audio/index.js';

/** The rate of the PCM an OpenAI-compatible `/v1/audio/speech` returns for `response_format: pcm`. */
export const UPSTREAM_PCM_RATE = 24_000;

/** 20 ms of 24 kHz samples: every target rate (8, 16, 22.05, 44.1, 48 kHz) maps it to a whole number of samples. */
const BLOCK_BYTES = 480 * 2;

export interface Production {
  /** What the upstream is asked for. */
  upstreamFormat: 'pcm';
  contentType: string;
  encoder(): AudioEncoder;
}

/**
 * Resamples whole 20 ms blocks as reads arrive, carrying what is left over (an odd byte, a part
 * block) to the next read, so the output has exactly the samples the whole input would give at the
 * target rate (resampling each read as it comes would drop a fraction of a sample per read).
 */
class Resampled implements AudioEncoder {
  private rest = Buffer.alloc(0);
  constructor(private readonly rate: number, private readonly encode: (samples: Int16Array) => Buffer) {}

  push(chunk: Buffer): Buffer {
    const all = this.rest.length ? Buffer.concat([this.rest, chunk]) : chunk;
    const whole = all.length - (all.length % BLOCK_BYTES);
    this.rest = Buffer.from(all.subarray(whole));
    return whole === 0 ? Buffer.alloc(0) : this.encode(resample(int16(all.subarray(0, whole)), UPSTREAM_PCM_RATE, this.rate));
  }

  end(): Buffer {
    const tail = this.rest.subarray(0, this.rest.length - (this.rest.length % 2));
    this.rest = Buffer.alloc(0);
    return tail.length === 0 ? Buffer.alloc(0) : this.encode(resample(int16(tail), UPSTREAM_PCM_RATE, this.rate));
  }
}

/** The MP3 encoder of src/audio fed PCM already at its rate. */
function mp3(rate: number, kbps: number): AudioEncoder {
  const lame = audioEncoder('mp3', { inRate: rate, kbps });
  const r = new Resampled(rate, (s) => lame.push(Buffer.from(bytes(s))));
  return { push: (c) => r.push(c), end: () => Buffer.concat([r.end(), lame.end()]) };
}

export function production(f: OutputFormat): Production {
  const spec = formatSpec(f);
  const made = (encoder: () => AudioEncoder): Production => ({ upstreamFormat: 'pcm', contentType: spec.contentType, encoder });
  switch (spec.codec) {
    case 'pcm':
      if (spec.sampleRate === UPSTREAM_PCM_RATE) return made(() => IDENTITY);
      return made(() => new Resampled(spec.sampleRate, (s) => Buffer.from(bytes(s))));
    case 'ulaw': case 'alaw': {
      const law = spec.codec;
      return made(() => new Resampled(spec.sampleRate, (s) => encodeG711(s, law)));
    }
    case 'mp3': return made(() => mp3(spec.sampleRate, spec.kbps ?? 128));
    case 'opus':
      // No pure-JS Opus encoder exists: src/audio's Ogg Opus is silent, and silence sold as speech would be a lie.
      throw new GatewayError({ status: 400, code: 'invalid_value', param: 'output_format',
        message: `output_format ${f} cannot be produced by this gateway (it has no Opus encoder); use an mp3_*, pcm_*, ulaw_8000 or alaw_8000 format.` });
  }
}

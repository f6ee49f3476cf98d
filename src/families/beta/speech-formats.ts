// ElevenLabs output formats for the stream-input WebSocket: PCM and G.711 made from the upstream's 24 kHz PCM (src/audio), mp3 and opus the upstream's own.
import { bytes, encodeG711, int16, resample } from '../../audio/index.js';

export interface OutputFormat {
  name: string;
  codec: 'pcm' | 'ulaw' | 'alaw' | 'mp3' | 'opus';
  sampleRate: number;
}

const ALL = ['mp3_22050_32', 'mp3_44100_32', 'mp3_44100_64', 'mp3_44100_96', 'mp3_44100_128', 'mp3_44100_192',
  'pcm_8000', 'pcm_16000', 'pcm_22050', 'pcm_24000', 'pcm_44100', 'pcm_48000', 'ulaw_8000', 'alaw_8000',
  'opus_48000_32', 'opus_48000_64', 'opus_48000_96', 'opus_48000_128', 'opus_48000_192'];

function parse(name: string): OutputFormat {
  const [codec, rate] = name.split('_') as [OutputFormat['codec'], string];
  return { name, codec, sampleRate: Number(rate) };
}

/**
 * Every format is served: PCM and G.711 are made here from the upstream's 24 kHz PCM; mp3 and opus are
 * the upstream's own (`response_format` mp3 or opus), at the sample rate and bit rate it encodes with:
 * an OpenAI-compatible speech server takes no bit rate, so `mp3_44100_128` and `mp3_22050_32` both
 * get its mp3.
 */
const MADE = ALL;

/** The WebSocket's enumeration: the REST one without pcm_48000 (api-notes A2). */
export const STREAM_FORMAT_NAMES: readonly string[] = ALL.filter((n) => n !== 'pcm_48000');
/** Those of them made here. */
export const STREAM_OUTPUT_FORMATS: ReadonlyMap<string, OutputFormat> = new Map(MADE.filter((n) => n !== 'pcm_48000').map((n) => [n, parse(n)]));

/** What to ask the upstream for: raw PCM to make PCM and G.711 from, or its own mp3 / opus. */
export function upstreamFormat(f: OutputFormat): 'pcm' | 'mp3' | 'opus' {
  return f.codec === 'mp3' || f.codec === 'opus' ? f.codec : 'pcm';
}

/** 24 kHz signed 16-bit little-endian mono PCM in the requested format (PCM and G.711 only). */
export function encodePcm(pcm24k: Buffer, f: OutputFormat): Buffer {
  const out = resample(int16(pcm24k), 24_000, f.sampleRate);
  return f.codec === 'pcm' ? bytes(out) : encodeG711(out, f.codec === 'ulaw' ? 'ulaw' : 'alaw');
}

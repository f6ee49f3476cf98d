// A model's prices as a client reads them: decimal-dollar strings per unit, named as the config names them.
import type { ModelConfig, ModelKind } from '../config.js';
import type { UnitPrices } from './pricing.js';
import { nanoToDecimal } from '../money.js';

/** Each published unit: its name (the config field's), the price field it shows, and what it is per. */
const UNITS: readonly { name: string; field: keyof UnitPrices }[] = [
  { name: 'input_per_mtok', field: 'inputPerMTok' },
  { name: 'output_per_mtok', field: 'outputPerMTok' },
  { name: 'per_mchar', field: 'perMChar' },
  { name: 'audio_in_per_minute', field: 'audioInPerMinute' },
  { name: 'audio_out_per_minute', field: 'audioOutPerMinute' },
  { name: 'audio_input_per_mtok', field: 'audioInputPerMTok' },
  { name: 'audio_output_per_mtok', field: 'audioOutputPerMTok' },
  { name: 'cached_input_per_mtok', field: 'cachedInputPerMTok' },
];

/** The units a model of each kind is always billed by (shown even at "0"): the config requires these. */
const BILLED_BY: Record<ModelKind, readonly string[]> = {
  chat: ['input_per_mtok', 'output_per_mtok'],
  embedding: ['input_per_mtok'],
  tts: ['per_mchar'],
  stt: ['audio_in_per_minute'],
  sts: ['audio_in_per_minute'],
  realtime: ['audio_in_per_minute', 'input_per_mtok', 'output_per_mtok', 'per_mchar'],
};
const PASSTHROUGH = ['input_per_mtok', 'output_per_mtok', 'audio_input_per_mtok', 'audio_output_per_mtok', 'cached_input_per_mtok'];
/** Token prices by modality exist only for a realtime pass-through (cached input defaults to the input price elsewhere). */
const PASSTHROUGH_ONLY = new Set(['audio_input_per_mtok', 'audio_output_per_mtok', 'cached_input_per_mtok']);

function table(m: ModelConfig, p: UnitPrices): Record<string, string> {
  const always = m.passthrough ? PASSTHROUGH : BILLED_BY[m.kind];
  const out: Record<string, string> = {};
  for (const u of UNITS) {
    if (!m.passthrough && PASSTHROUGH_ONLY.has(u.name)) continue;
    const v = p[u.field] ?? 0n;
    if (v > 0n || always.includes(u.name)) out[u.name] = nanoToDecimal(v);
  }
  return out;
}

/**
 * `pricing`: what the ledger charges this model per unit, in dollars (exact decimal strings: per 1M tokens,
 * per 1M characters, per minute of audio), and under `batch` a batch line's prices when they differ.
 */
export function publishedPricing(m: ModelConfig): Record<string, unknown> {
  const live = table(m, m.prices);
  const batch = m.batchPrices === m.prices ? undefined : table(m, m.batchPrices);
  return { currency: 'usd', ...live, ...(batch ? { batch } : {}) };
}

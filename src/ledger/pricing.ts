// Prices usage in every unit (tokens, characters, audio time) from a model's unit prices, rounding up once.
import { nd, type Nanodollars, type UnitPrices } from '../money.js';

/** Defined beside the money (the config reads prices, and the config sits below the ledger); re-exported for the ledger's callers. */
export type { UnitPrices } from '../money.js';

/** What a price applies to (the exchange's Usage has these fields). */
export interface Units {
  inputTokens: number;
  outputTokens: number;
  characters: number;
  audioInMs: number;
  audioOutMs: number;
  /** Tokens a realtime upstream reports by modality, apart from inputTokens and outputTokens (absent: zero). */
  audioInputTokens?: number;
  audioOutputTokens?: number;
  cachedInputTokens?: number;
}

// Per million (tokens, characters) and per 60,000 ms share the denominator 3,000,000.
const DENOM = 3_000_000n;
const PER_MILLION = DENOM / 1_000_000n;  // 3
const PER_MINUTE_MS = DENOM / 60_000n;   // 50

/**
 * ceil(Σ units × unit price / unit size): every unit summed exactly over one common denominator,
 * then rounded up once, so the charge is never below the exact price and at most 1 nanodollar above.
 */
export function price(p: UnitPrices, u: Units): Nanodollars {
  const num = (BigInt(u.inputTokens) * p.inputPerMTok + BigInt(u.outputTokens) * p.outputPerMTok + BigInt(u.characters) * p.perMChar
    + BigInt(u.audioInputTokens ?? 0) * (p.audioInputPerMTok ?? 0n) + BigInt(u.audioOutputTokens ?? 0) * (p.audioOutputPerMTok ?? 0n)
    + BigInt(u.cachedInputTokens ?? 0) * (p.cachedInputPerMTok ?? 0n)) * PER_MILLION
    + (BigInt(u.audioInMs) * p.audioInPerMinute + BigInt(u.audioOutMs) * p.audioOutPerMinute) * PER_MINUTE_MS;
  return nd(num <= 0n ? 0n : (num + DENOM - 1n) / DENOM);
}

/** Prices with no per-unit rate set (a zero for every unit). */
export const FREE: UnitPrices = Object.freeze({ inputPerMTok: 0n, outputPerMTok: 0n, perMChar: 0n, audioInPerMinute: 0n, audioOutPerMinute: 0n });

/**
 * The most a text request can cost (its hold): every body byte as a prompt token (a token is never
 * shorter than a byte) plus the largest output it may produce.
 */
export function worstCaseTokens(p: UnitPrices, bodyBytes: number, maxOutputTokens: number): Nanodollars {
  return price(p, { inputTokens: bodyBytes, outputTokens: maxOutputTokens, characters: 0, audioInMs: 0, audioOutMs: 0 });
}

// Prices usage from the model's per-million-token rates, and the worst case a request may cost (its hold).
import type { ModelConfig } from '../config.js';
import { nd, type Nanodollars } from './money.js';

export interface TokenUsage { input: number; output: number }

/** ceil((input × in + output × out) / 1e6): one rounding, never under the exact price. */
export function priceTokens(m: ModelConfig, u: TokenUsage): Nanodollars {
  const num = BigInt(u.input) * m.inputPerMTok + BigInt(u.output) * m.outputPerMTok;
  return nd(num <= 0n ? 0n : (num + 999_999n) / 1_000_000n);
}

/**
 * The most a request can cost: every body byte as a prompt token (a token is never shorter than a
 * byte) plus the largest output it may produce.
 */
export function worstCase(m: ModelConfig, bodyBytes: number, maxOutputTokens: number): Nanodollars {
  return priceTokens(m, { input: bodyBytes, output: maxOutputTokens });
}

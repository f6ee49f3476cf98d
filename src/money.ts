// Money as integer nanodollars (1e-9 USD) in bigint; dollars exist only at the JSON edge.

export type Nanodollars = bigint & { readonly __brand: 'nanodollars' };

export const NANO_PER_DOLLAR = 1_000_000_000n;

export function nd(v: bigint): Nanodollars {
  return v as Nanodollars;
}

/** Parses a decimal dollar amount ("12.5", 12.5, "0.000000001") exactly; throws on more than 9 decimals. */
export function dollarsToNano(input: string | number): Nanodollars {
  const text = typeof input === 'number' ? numberToPlain(input) : input.trim();
  const m = /^(-)?(\d+)(?:\.(\d{1,9}))?$/.exec(text);
  if (!m) throw new RangeError(`not a dollar amount with at most 9 decimals: ${text}`);
  const whole = BigInt(m[2] ?? '0');
  const frac = BigInt((m[3] ?? '').padEnd(9, '0'));
  const v = whole * NANO_PER_DOLLAR + frac;
  return nd(m[1] ? -v : v);
}

function numberToPlain(n: number): string {
  if (!Number.isFinite(n)) throw new RangeError('not a finite number');
  // toFixed(9) keeps what a JSON number can carry without exponent notation.
  return n.toFixed(9).replace(/\.?0+$/, '');
}

/** Exact decimal string of a nanodollar amount, e.g. 1500000000n -> "1.5". */
export function nanoToDecimal(v: bigint): string {
  const neg = v < 0n;
  const a = neg ? -v : v;
  const whole = a / NANO_PER_DOLLAR;
  const frac = (a % NANO_PER_DOLLAR).toString().padStart(9, '0').replace(/0+$/, '');
  return `${neg ? '-' : ''}${whole}${frac ? `.${frac}` : ''}`;
}

/** Decimal dollars with exactly 9 decimals, e.g. 1500000000n -> "1.500000000" (the `x-tollgate-cost` header, receipts). */
export function nanoToFixed9(v: bigint): string {
  const neg = v < 0n;
  const a = neg ? -v : v;
  return `${neg ? '-' : ''}${a / NANO_PER_DOLLAR}.${(a % NANO_PER_DOLLAR).toString().padStart(9, '0')}`;
}

/** Dollars as a JSON number for responses (the only place money becomes a float). */
export function nanoToDollars(v: bigint): number {
  return Number(nanoToDecimal(v));
}

/** cost = ceil(units * pricePerMillion / 1e6): never bills less than the exact price. */
export function priceUnits(units: bigint, pricePerMillion: bigint): Nanodollars {
  if (units <= 0n || pricePerMillion <= 0n) return nd(0n);
  const num = units * pricePerMillion;
  return nd((num + 999_999n) / 1_000_000n);
}

/** A model's prices in nanodollars per unit: per 1M tokens, per 1M characters, per minute of audio. */
export interface UnitPrices {
  inputPerMTok: bigint;
  outputPerMTok: bigint;
  perMChar: bigint;
  audioInPerMinute: bigint;
  audioOutPerMinute: bigint;
  /**
   * Audio and cached tokens as a realtime upstream reports them (per 1M tokens; absent: zero). Only
   * a realtime pass-through's usage has such tokens; its config fills all three.
   */
  audioInputPerMTok?: bigint;
  audioOutputPerMTok?: bigint;
  cachedInputPerMTok?: bigint;
}

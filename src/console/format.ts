// Display formats for the console: exact dollar amounts from nanodollars, UTC times, token counts.
import { nanoToDecimal } from '../money.js';

/** Exact dollars with at least cents and thousands separators: 1500000000n -> "$1.50", 34000n -> "$0.000034". */
export function usd(v: bigint, opts: { plus?: boolean } = {}): string {
  const neg = v < 0n;
  const [whole = '0', frac = ''] = nanoToDecimal(neg ? -v : v).split('.');
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  const sign = neg ? '\u2212' : opts.plus && v > 0n ? '+' : '';
  return `${sign}$${grouped}.${frac.padEnd(2, '0')}`;
}

/** "2025-06-01 14:03 UTC"-style, always UTC so that the chart's days and the table agree. */
export function utc(d: Date, seconds = false): string {
  return `${d.toISOString().slice(0, seconds ? 19 : 16).replace('T', ' ')} UTC`;
}

export function day(d: Date): string {
  return d.toISOString().slice(0, 10);
}

export function count(n: number): string {
  return n.toLocaleString('en-US');
}

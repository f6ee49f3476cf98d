// Puts an exchange's cost into a JSON event as a plain JSON number (decimal dollars, at most 9 decimals, never exponent notation).
import { randomBytes } from 'node:crypto';
import { nanoToDecimal } from '../money.js';

/** A placeholder set where the cost goes before the event is serialized: random per process, so no text a model writes can be it. */
export const COST_MARK = `\u0000tollgate-cost-${randomBytes(9).toString('base64url')}`;
const MARK_JSON = JSON.stringify(COST_MARK);

/** The serialized event with the placeholder (its last occurrence) replaced by the cost as a JSON number. */
export function putCost(json: string, cost: bigint): string {
  const at = json.lastIndexOf(MARK_JSON);
  return at < 0 ? json : `${json.slice(0, at)}${nanoToDecimal(cost)}${json.slice(at + MARK_JSON.length)}`;
}

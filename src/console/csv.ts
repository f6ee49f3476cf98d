// CSV per RFC 4180: fields with a comma, quote or line break are quoted and quotes doubled; text that a
// spreadsheet would run as a formula is defused with a leading apostrophe.
import { nanoToDecimal } from '../money.js';
import type { LedgerRow } from '../store/console.js';

export function csvField(v: string | number | bigint | null | undefined, text = true): string {
  if (v === null || v === undefined) return '';
  let s = String(v);
  if (text && /^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function csvRow(fields: string[]): string {
  return `${fields.join(',')}\r\n`;
}

/** The units a debit was priced by follow the request id (added later, so the first nine columns keep their places). */
export const LEDGER_HEADER = csvRow(['time', 'kind', 'amount_usd', 'reason', 'model', 'key_prefix', 'input_tokens', 'output_tokens', 'request_id',
  'characters', 'audio_seconds_in', 'audio_seconds_out', 'audio_input_tokens', 'audio_output_tokens', 'cached_input_tokens']);

/** One ledger entry; the amount is exact decimal dollars (credits positive, debits negative); a debit names its request's `x-request-id`. */
export function ledgerCsvRow(e: LedgerRow): string {
  return csvRow([
    e.at.toISOString(), e.kind, nanoToDecimal(e.amount), csvField(e.reason), csvField(e.model), csvField(e.keyPrefix),
    csvField(e.inputTokens, false), csvField(e.outputTokens, false), csvField(e.requestId),
    csvField(e.characters, false), csvField(e.audioSecondsIn, false), csvField(e.audioSecondsOut, false),
    csvField(e.audioInputTokens, false), csvField(e.audioOutputTokens, false), csvField(e.cachedInputTokens, false),
  ]);
}

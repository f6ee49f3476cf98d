// The realtime protocol's shared pieces: ids, close codes, the error a client event gets, PCM constants, and the item and response shapes a session keeps.
import { CLOSE } from '../../../errors.js';
import { base62 } from '../../../store/ids.js';
import type { Charge } from '../../../exchange/charge.js';
import { nanoToDecimal } from '../../../money.js';

export type Obj = Record<string, unknown>;

/** A client frame as the JSON object every event is; null for anything else (binary, not JSON, not an object), which the session answers with an `invalid_json` error event and goes on. */
export function eventOf(data: Buffer, isBinary: boolean): Obj | null {
  if (isBinary) return null;
  try {
    const v = JSON.parse(data.toString('utf8')) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? v as Obj : null;
  } catch {
    return null;
  }
}

/** A protocol id (`item_...`, `event_...`, `resp_...`, `call_...`). */
export function rid(prefix: string): string { return `${prefix}_${base62(16)}`; }

/** Close codes (their one home is errors.ts's CLOSE): 1001 going away, 1008 a policy refusal (balance, rate). */
export const { GOING_AWAY, POLICY } = CLOSE;

/** Older (beta) client event names, accepted as their GA names. */
export const CLIENT_ALIASES: Record<string, string> = { 'transcription_session.update': 'session.update' };

/** A client event refused: an `error` event naming the field; the session goes on unchanged. */
export class RtError extends Error {
  constructor(readonly code: string, readonly param: string | null, message: string, readonly type = 'invalid_request_error') { super(message); }
}

/** What a session ended by a refusal (its balance or ceiling spent) is told it was billed: every part it settled. */
export function billedSoFar(charge: Pick<Charge, 'billed'>): string {
  return `This session was billed $${nanoToDecimal(charge.billed)} (${charge.billed} nd) in all.`;
}

/**
 * `ev` as JSON, its `holder.usage` object carrying `cost`: what the part was billed, in dollars as a JSON
 * number written exactly (at most 9 decimals, never an exponent), as the receipts and `x-tollgate-cost` state it.
 * The official clients keep unknown usage fields (python openai's models allow extras).
 */
export function withCost(ev: Obj, holder: Obj, cost: bigint): string {
  const u = holder.usage as Obj;
  const mark = rid('cost');
  holder.usage = mark;
  const fields = JSON.stringify(u).slice(1, -1);
  const json = JSON.stringify(ev).replace(`"${mark}"`, () => `{${fields}${fields ? ',' : ''}"cost":${nanoToDecimal(cost)}}`);
  holder.usage = u;
  return json;
}

/** Realtime PCM: 16-bit mono at 24 kHz, 48 bytes a millisecond. */
export const RATE = 24_000;
export const BYTES_PER_MS = 48;

export interface Item { id: string; type: string; role?: string; status?: string; content?: Obj[]; call_id?: string; name?: string; arguments?: string; output?: string; object?: string }

/** A stretch of an assistant item's audio: the text spoken in it and how long its audio is. */
export interface Spoken { text: string; ms: number; /** Its audio ended before the text was spoken (cancelled, dropped, failed). */ cut: boolean }

/** The response under way. */
export interface Active {
  id: string;
  /** Aborted to stop its upstream calls (the chat stream, and a speech call beside it): a cancel, a drop, a failed sentence. */
  stop: AbortController;
  /** The ids of the items it outputs (they join the conversation when it is done). */
  itemIds: string[];
  /** Settles once the response is done and billed. */
  finished: Promise<void> | null;
  cancelled: boolean;
  /** Why it was cancelled: the client asked, or the user started speaking (interrupt_response). */
  cancelReason: 'client_cancelled' | 'turn_detected';
  dropped: boolean;
}

/** Stops a response's upstream calls (what they produced is still billed). */
export function abortCalls(a: Active): void {
  a.stop.abort();
}

// Who an exchange answers (a live request or a batch line), and the batch endpoints a family hands the batch worker.
import type { KeyRecord } from '../store/keys.js';
import type { GatewayError } from '../errors.js';
import type { Downstream } from './relay-http.js';

/**
 * Who an exchange answers: a live request's Ctx, or a batch line whose Downstream collects the reply.
 * `debit` names the ledger entry when it is not the request id (a batch line: `batch:<batch_id>:<custom_id>`,
 * with one nonce for every attempt of the line, so a line run again after a crash is billed once).
 */
export interface ExchangeClient extends Downstream {
  readonly key: KeyRecord | null;
  readonly requestId: string;
  readonly routeName: string;
  readonly headers: Record<string, string>;
  /** `batch`: priced at the model's batch prices. */
  readonly debit?: { id: string; nonce: string; batch?: boolean };
}

/** Runs one request of an endpoint (the same function the live route runs). */
export type LineRunner = (client: ExchangeClient, body: Buffer) => Promise<void>;

export interface BatchEndpoints {
  /** By endpoint (`/v1/chat/completions`): the runner and the route name its ledger entries carry. */
  runners: Map<string, { run: LineRunner; name: string }>;
  /** The family's error envelope, for the body of an error line. */
  render(err: GatewayError, requestId: string): string;
}

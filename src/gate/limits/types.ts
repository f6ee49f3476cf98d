// The limiter contract: one atomic step that checks money, rpm and concurrency and places the in-flight hold.

export interface AdmitInput {
  requestId: string;
  accountId: string;
  keyId: string;
  rpm: number;
  concurrency: number;
  hold: bigint;             // worst-case cost of this request, nanodollars
  balance: bigint;          // settled balance as this instance knows it
  ceiling: bigint | null;   // the key's spend limit for its period, or none
  periodSpent: bigint;      // the key's settled spend in that period
  ttlMs: number;            // a hold whose request died is dropped after this
}

export type AdmitOutcome =
  | { ok: true; remaining: number; resetMs: number }
  | { ok: false; reason: 'insufficient_balance' | 'key_spend_limit_reached' }
  | { ok: false; reason: 'rate_limit_exceeded'; remaining: number; resetMs: number; retryMs: number }
  | { ok: false; reason: 'concurrency_limit_exceeded'; inFlight: number; remaining: number; resetMs: number };

export interface Limiter {
  readonly kind: 'memory' | 'redis';
  admit(input: AdmitInput): Promise<AdmitOutcome>;
  release(accountId: string, requestId: string): Promise<void>;
  /** Open holds (for invariants in tests and for /metrics). */
  openHolds(accountId: string): Promise<number>;
  close(): Promise<void>;
}

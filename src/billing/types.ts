// The payment provider interface (Stripe or the embedded sandbox) and the webhook event shapes Tollgate reads.

/** A webhook event as Stripe sends it; only the fields fulfilment reads are typed. */
export interface WebhookEvent {
  id: string;
  type: string;
  created?: number;
  data: { object: Record<string, unknown> };
}

export interface SessionRequest {
  accountId: string;
  currency: string;
  successUrl: string;            // may contain {CHECKOUT_SESSION_ID}
  cancelUrl: string;
  baseUrl: string;               // where the sandbox serves its checkout page
}

export interface CheckoutRequest extends SessionRequest { amountCents: number; customer: string | null; email: string | null }
export interface SetupRequest extends SessionRequest { customer: string }

export interface OffSessionCharge {
  accountId: string;
  customer: string;
  paymentMethod: string;
  amountCents: number;
  currency: string;
  idempotencyKey: string;         // one per attempt: a retry of the same attempt charges once
  metadata: Record<string, string>;
}

export type ChargeResult =
  | { ok: true; paymentIntent: string }
  | { ok: false; code: string; paymentIntent: string | null; transient: boolean; message: string };

export interface Provider {
  readonly name: 'sandbox' | 'stripe';
  createCustomer(accountId: string, email: string | null): Promise<string>;
  createCheckout(r: CheckoutRequest): Promise<{ id: string; url: string }>;
  createSetup(r: SetupRequest): Promise<{ id: string; url: string }>;
  /** The payment method a completed setup session saved (fetching its SetupIntent when the event holds only an id). */
  setupPaymentMethod(session: Record<string, unknown>): Promise<string | null>;
  chargeOffSession(c: OffSessionCharge): Promise<ChargeResult>;
  /** Verifies the signature over the raw body and returns the event; throws a 400 GatewayError otherwise. */
  verify(raw: Buffer, signature: string | undefined): unknown;
}

/** Cents (the wire) to nanodollars (the ledger): exact. */
export function centsToNano(cents: number): bigint {
  return BigInt(cents) * 10_000_000n;
}

/** Nanodollars to cents; only whole cents are ever charged. */
export function nanoToCents(nano: bigint): number {
  if (nano % 10_000_000n !== 0n) throw new RangeError('not a whole number of cents');
  return Number(nano / 10_000_000n);
}

export function str(v: unknown): string | null {
  return typeof v === 'string' && v.length > 0 ? v : null;
}

export function obj(v: unknown): Record<string, unknown> | null {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
}

/** A Stripe id field: either the id itself or an expanded object carrying `id`. */
export function idOf(v: unknown): string | null {
  return str(v) ?? str(obj(v)?.id);
}

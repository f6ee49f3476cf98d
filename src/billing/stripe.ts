// The `stripe` provider: Checkout sessions, customers and off-session PaymentIntents through the official SDK.
import Stripe from 'stripe';
import type { ChargeResult, CheckoutRequest, OffSessionCharge, Provider, SetupRequest } from './types.js';
import { idOf, obj, str } from './types.js';
import { badSignature, TOLERANCE_SEC } from './signature.js';

const PRODUCT_NAME = 'Tollgate prepaid credit';

export class StripeProvider implements Provider {
  readonly name = 'stripe' as const;
  private readonly stripe: Stripe;

  constructor(secretKey: string, private readonly webhookSecret: string, apiBase: string | undefined) {
    const u = apiBase ? new URL(apiBase) : null;
    const protocol = u?.protocol === 'http:' ? 'http' as const : 'https' as const;
    this.stripe = new Stripe(secretKey, {
      ...(u ? { host: u.hostname, port: Number(u.port || (protocol === 'http' ? 80 : 443)), protocol } : {}),
      maxNetworkRetries: 2, timeout: 30_000, telemetry: false, appInfo: { name: 'tollgate' },
    });
  }

  async createCustomer(accountId: string, email: string | null): Promise<string> {
    // Keyed by account, so two instances racing to create the first customer get the same one.
    const c = await this.stripe.customers.create({ ...(email ? { email } : {}), metadata: { account_id: accountId } },
      { idempotencyKey: `tollgate-customer-${accountId}` });
    return c.id;
  }

  async createCheckout(r: CheckoutRequest): Promise<{ id: string; url: string }> {
    const s = await this.stripe.checkout.sessions.create({
      mode: 'payment',
      line_items: [{ price_data: { currency: r.currency, unit_amount: r.amountCents, product_data: { name: PRODUCT_NAME } }, quantity: 1 }],
      client_reference_id: r.accountId,
      metadata: { account_id: r.accountId },
      ...(r.customer ? { customer: r.customer } : r.email ? { customer_email: r.email } : {}),
      success_url: r.successUrl,
      cancel_url: r.cancelUrl,
    });
    if (!s.url) throw new Error(`Stripe returned checkout session ${s.id} without a url`);
    return { id: s.id, url: s.url };
  }

  async createSetup(r: SetupRequest): Promise<{ id: string; url: string }> {
    const s = await this.stripe.checkout.sessions.create({
      mode: 'setup',
      customer: r.customer,
      currency: r.currency,
      client_reference_id: r.accountId,
      metadata: { account_id: r.accountId },
      setup_intent_data: { metadata: { account_id: r.accountId } },
      success_url: r.successUrl,
      cancel_url: r.cancelUrl,
    });
    if (!s.url) throw new Error(`Stripe returned setup session ${s.id} without a url`);
    return { id: s.id, url: s.url };
  }

  async setupPaymentMethod(session: Record<string, unknown>): Promise<string | null> {
    const si = session.setup_intent;
    const expanded = obj(si);
    if (expanded && expanded.payment_method !== undefined) return idOf(expanded.payment_method);
    const id = idOf(si);
    if (!id) return null;
    const intent = await this.stripe.setupIntents.retrieve(id);
    return idOf(intent.payment_method);
  }

  async chargeOffSession(c: OffSessionCharge): Promise<ChargeResult> {
    try {
      const pi = await this.stripe.paymentIntents.create({
        amount: c.amountCents, currency: c.currency, customer: c.customer, payment_method: c.paymentMethod,
        off_session: true, confirm: true, metadata: c.metadata, description: 'Tollgate automatic top-up',
      }, { idempotencyKey: c.idempotencyKey });
      if (pi.status === 'succeeded' || pi.status === 'processing') return { ok: true, paymentIntent: pi.id };
      const code = pi.status === 'requires_action' ? 'authentication_required' : 'card_declined';
      return { ok: false, code, paymentIntent: pi.id, transient: false, message: `payment intent is ${pi.status}` };
    } catch (e) {
      return chargeError(e);
    }
  }

  verify(raw: Buffer, signature: string | undefined): unknown {
    if (!signature) throw badSignature('no Stripe-Signature header.');
    try {
      return this.stripe.webhooks.constructEvent(raw, signature, this.webhookSecret, TOLERANCE_SEC);
    } catch (e) {
      throw badSignature((e as Error).message.split('\n')[0] ?? 'invalid signature.');
    }
  }
}

/** Maps a Stripe error: card errors are final (authentication_required or card_declined), network and 5xx are transient. */
function chargeError(e: unknown): ChargeResult {
  const err = obj(e) ?? {};
  const rawType = str(err.rawType);
  const code = str(err.code);
  const decline = str(err.decline_code);
  const paymentIntent = idOf(err.payment_intent);
  const message = e instanceof Error ? e.message : String(e);
  if (rawType === 'card_error') {
    const auth = code === 'authentication_required' || decline === 'authentication_required';
    return { ok: false, code: auth ? 'authentication_required' : 'card_declined', paymentIntent, transient: false, message };
  }
  if (rawType === 'invalid_request_error' || rawType === 'idempotency_error') return { ok: false, code: 'failed', paymentIntent, transient: false, message };
  return { ok: false, code: 'failed', paymentIntent, transient: true, message };
}

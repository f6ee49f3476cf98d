// The `sandbox` provider: Checkout and off-session charges simulated in process, fulfilled by signed events to the real webhook.
import { createHash } from 'node:crypto';
import { GatewayError } from '../errors.js';
import { base62 } from '../store/ids.js';
import type { SessionRow } from './store.js';
import type { ChargeResult, CheckoutRequest, OffSessionCharge, Provider, SetupRequest, WebhookEvent } from './types.js';
import { obj, idOf } from './types.js';
import { invalidEvent, signatureHeader, verifySignature } from './signature.js';

export const SANDBOX_PATH = '/svc/v1/billing/sandbox/checkout';

/** Test cards, as on Stripe: 4242… pays, …0002 is declined, …3184 saves a card whose off-session charges need authentication. */
export const TEST_CARD = '4242 4242 4242 4242';
const DECLINED_CARD = '4000000000000002';
const AUTH_REQUIRED_CARD = '4000002760003184';

/** Sends one signed event to the webhook; resolves once it was accepted. */
export type Deliver = (payload: string, signature: string, host?: string) => Promise<void>;

function eventOf(id: string, type: string, object: Record<string, unknown>): WebhookEvent & Record<string, unknown> {
  return { id, object: 'event', type, created: Math.floor(Date.now() / 1000), livemode: false, api_version: null, data: { object } };
}

/** A stable id derived from `seed`: a retried attempt yields the same payment intent and event ids. */
function derived(prefix: string, seed: string): string {
  return `${prefix}_sandbox_${createHash('sha256').update(seed).digest('hex').slice(0, 24)}`;
}

export class SandboxProvider implements Provider {
  readonly name = 'sandbox' as const;

  constructor(private readonly webhookSecret: string, private readonly deliver: Deliver) {}

  async createCustomer(): Promise<string> {
    return `cus_sandbox_${base62(16)}`;
  }

  async createCheckout(r: CheckoutRequest): Promise<{ id: string; url: string }> {
    return this.session(r.baseUrl);
  }

  async createSetup(r: SetupRequest): Promise<{ id: string; url: string }> {
    return this.session(r.baseUrl);
  }

  private session(baseUrl: string): { id: string; url: string } {
    const id = `cs_sandbox_${base62(24)}`;
    return { id, url: `${baseUrl}${SANDBOX_PATH}/${id}` };
  }

  async setupPaymentMethod(session: Record<string, unknown>): Promise<string | null> {
    return idOf(obj(session.setup_intent)?.payment_method);
  }

  async chargeOffSession(c: OffSessionCharge): Promise<ChargeResult> {
    const pi = derived('pi', c.idempotencyKey);
    const needsAuth = c.paymentMethod.startsWith('pm_sandbox_authreq_');
    const intent: Record<string, unknown> = {
      id: pi, object: 'payment_intent', amount: c.amountCents, amount_received: needsAuth ? 0 : c.amountCents, currency: c.currency,
      customer: c.customer, payment_method: c.paymentMethod, metadata: c.metadata, off_session: true,
      status: needsAuth ? 'requires_payment_method' : 'succeeded',
      last_payment_error: needsAuth ? { type: 'card_error', code: 'authentication_required', decline_code: 'authentication_required',
        message: 'This card needs the cardholder to authenticate the payment (sandbox test card).' } : null,
    };
    const type = needsAuth ? 'payment_intent.payment_failed' : 'payment_intent.succeeded';
    await this.send(eventOf(derived('evt', `${pi}:${type}`), type, intent));
    return needsAuth
      ? { ok: false, code: 'authentication_required', paymentIntent: pi, transient: false, message: 'authentication required (sandbox test card)' }
      : { ok: true, paymentIntent: pi };
  }

  /**
   * "Pay" on the sandbox checkout page: a declined test card changes nothing; any other card completes the
   * session by posting `checkout.session.completed` to the webhook, exactly as Stripe would.
   */
  async complete(session: SessionRow, cardNumber: string, customer: string | null, host: string | undefined): Promise<'completed' | 'declined'> {
    const card = cardNumber.replace(/[\s-]/g, '');
    if (card === DECLINED_CARD) return 'declined';
    const base: Record<string, unknown> = {
      id: session.id, object: 'checkout.session', mode: session.mode, status: 'complete', currency: session.currency,
      client_reference_id: session.accountId, metadata: { account_id: session.accountId }, livemode: false,
    };
    if (session.mode === 'payment') {
      const cents = Number(session.amount! / 10_000_000n);
      Object.assign(base, { payment_status: 'paid', amount_total: cents, amount_subtotal: cents, customer, payment_intent: derived('pi', session.id) });
    } else {
      if (!customer) throw new Error(`sandbox setup session ${session.id} has no customer`);
      const pm = `pm_sandbox_${card === AUTH_REQUIRED_CARD ? 'authreq_' : ''}${base62(16)}`;
      Object.assign(base, { payment_status: 'no_payment_required', customer,
        setup_intent: { id: derived('seti', session.id), object: 'setup_intent', status: 'succeeded', customer, payment_method: pm } });
    }
    await this.send(eventOf(`evt_sandbox_${base62(24)}`, 'checkout.session.completed', base), host);
    return 'completed';
  }

  private async send(event: Record<string, unknown>, host?: string): Promise<void> {
    const payload = JSON.stringify(event);
    await this.deliver(payload, signatureHeader(payload, this.webhookSecret), host);
  }

  verify(raw: Buffer, signature: string | undefined): unknown {
    verifySignature(raw, signature, this.webhookSecret);
    try {
      return JSON.parse(raw.toString('utf8'));
    } catch {
      throw invalidEvent('the payload is not JSON.');
    }
  }
}

export function sandboxOnly(): GatewayError {
  return new GatewayError({ code: 'not_found', message: 'No such sandbox checkout session.' });
}

// One Billing per gateway: the configured provider, top-up and card sessions, webhook delivery to itself, and auto top-up.
import type { EventEmitter } from 'node:events';
import type { Config } from '../config.js';
import type { Db } from '../store/db.js';
import type { Settler } from '../ledger/settle.js';
import { GatewayError, type ValidationDetail } from '../errors.js';
import { nanoToDollars, NANO_PER_DOLLAR } from '../money.js';
import { accountById } from '../store/accounts.js';
import { log } from '../observe/log.js';
import { AutoTopup } from './autotopup.js';
import { receiveWebhook } from './fulfil.js';
import { SandboxProvider } from './sandbox.js';
import { customerOf, insertSession, putCustomer } from './store.js';
import { nanoToCents, type Provider } from './types.js';

export const WEBHOOK_PATH = '/svc/v1/billing/webhook';
export const MIN_TOPUP = 5n * NANO_PER_DOLLAR;
export const MAX_TOPUP = 1000n * NANO_PER_DOLLAR;

export interface Payments {
  checkout(accountId: string, amountNano: bigint, returnUrl?: string, baseUrl?: string): Promise<{ url: string; session_id: string; amount: number }>;
  setupCard(accountId: string, returnUrl?: string, baseUrl?: string): Promise<{ url: string; session_id: string }>;
}

/** 422 naming `param`; `message` is shown as is when it is a sentence of its own (the console prints it). */
export function invalidField(param: string, msg: string, message = `Invalid request body: ${param}: ${msg}.`): GatewayError {
  const detail: ValidationDetail[] = [{ loc: ['body', param], msg, type: 'value_error' }];
  return new GatewayError({ code: 'validation_error', param, message, detail });
}

/** A dollar amount from `min` to `max` in whole cents; 422 naming `param` otherwise. */
export function checkCents(v: bigint, param: string, min: bigint, max: bigint, msg: string, message?: string): bigint {
  if (v < min || v > max || v % 10_000_000n !== 0n) throw invalidField(param, msg, message);
  return v;
}

/** Appends the session placeholder Stripe fills in, before any fragment, unless the URL carries it already. */
function withSessionParam(url: string, name: string): string {
  if (url.includes('{CHECKOUT_SESSION_ID}')) return url;
  const hash = url.indexOf('#');
  const [head, frag] = hash < 0 ? [url, ''] : [url.slice(0, hash), url.slice(hash)];
  return `${head}${head.includes('?') ? '&' : '?'}${name}={CHECKOUT_SESSION_ID}${frag}`;
}

function portOf(host: string | undefined): number | null {
  const m = host ? /:(\d{1,5})$/.exec(host) : null;
  const p = m ? Number(m[1]) : 0;
  return p > 0 && p < 65536 ? p : null;
}

const SANE_HOST = /^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/;

/** The outcome of the last payment provider call this process made (the status page shows it; nothing calls the provider to find out). */
export const lastProviderCall = { ok: true, at: 0 };

/** A provider call; its failure is logged and answered with 502 (the provider's own words are not passed on). */
async function via<T>(what: string, call: () => Promise<T>): Promise<T> {
  try {
    const out = await call();
    lastProviderCall.ok = true; lastProviderCall.at = Date.now();
    return out;
  } catch (e) {
    if (e instanceof GatewayError) throw e;
    lastProviderCall.ok = false; lastProviderCall.at = Date.now();
    log('error', `payment provider failed to ${what}`, { error: String((e as Error)?.message ?? e) });
    throw new GatewayError({ code: 'payment_provider_error', retryable: true,
      message: `The payment provider could not ${what} right now; try again.` });
  }
}

/** What payments need of the gateway: its config and store, the settler that credits, and the balance events auto top-up watches. */
export interface BillingDeps { config: Config; db: Db; settler: Settler; events: EventEmitter }

export class Billing implements Payments {
  readonly provider: Promise<Provider>;
  readonly auto: AutoTopup;
  private learnedPort: number | null = null;

  private readonly onBalance = (accountId: string, balance: bigint) => this.auto.onBalance(accountId, balance);

  constructor(readonly s: BillingDeps) {
    const p = s.config.payments;
    // The Stripe SDK is loaded only when it is the provider.
    this.provider = p.provider === 'stripe'
      ? import('./stripe.js').then((m) => new m.StripeProvider(p.secretKey!, p.webhookSecret, p.apiBase))
      : Promise.resolve(new SandboxProvider(p.webhookSecret, (payload, sig, host) => this.deliver(payload, sig, host)));
    this.auto = new AutoTopup(this);
    s.events.on('balance', this.onBalance);
  }

  /** Stops watching balances (auto top-up). */
  close(): void {
    this.s.events.off('balance', this.onBalance);
  }

  /** The base URL a browser reaches this gateway at, for links handed out in answer to a request. */
  requestBase(host: string | undefined): string {
    const c = this.s.config;
    if (c.listen.port === 0 && host) this.learnedPort = portOf(host) ?? this.learnedPort;
    if (c.publicUrl) return c.publicUrl;
    if (host && SANE_HOST.test(host)) return `${c.console.secureCookies ? 'https' : 'http'}://${host}`;
    return this.listenUrl(c.listen.port) ?? 'http://127.0.0.1:8080';
  }

  private listenUrl(port: number): string | null {
    if (!port) return null;
    const h = this.s.config.listen.host;
    const host = h === '0.0.0.0' || h === '' ? '127.0.0.1' : h === '::' ? '[::1]' : h.includes(':') ? `[${h}]` : h;
    return `http://${host}:${port}`;
  }

  /**
   * Where the sandbox posts its events: this process's own listener (only the port may come from the
   * request, never the host, so a Host header cannot aim the post elsewhere), else the public URL.
   */
  private selfUrl(host: string | undefined): string | null {
    const c = this.s.config;
    return this.listenUrl(c.listen.port) ?? this.listenUrl(portOf(host) ?? this.learnedPort ?? 0) ?? c.publicUrl ?? null;
  }

  /** Posts a signed sandbox event to the webhook over HTTP like the real provider; in process when no URL is known. */
  private async deliver(payload: string, signature: string, host?: string): Promise<void> {
    const base = this.selfUrl(host);
    if (!base) { await receiveWebhook(this, Buffer.from(payload), signature); return; }
    const res = await fetch(base + WEBHOOK_PATH, {
      method: 'POST', body: payload, headers: { 'content-type': 'application/json', 'stripe-signature': signature },
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`the webhook answered ${res.status}: ${text.slice(0, 300)}`);
  }

  /**
   * A return_url leads back to this gateway (public_url, or without it the base the request came in on) or to
   * an origin listed in payments.return_origins: a checkout link never hands a paying browser to anyone else.
   */
  private checkReturn(returnUrl: string | undefined, base: string): void {
    if (returnUrl === undefined) return;
    let origin: string | null = null;
    try {
      const u = new URL(returnUrl);
      origin = u.username || u.password ? null : u.origin;
    } catch { /* not a URL: refused below */ }
    const own = new URL(base).origin;
    if (origin !== null && (origin === own || this.s.config.payments.returnOrigins.includes(origin))) return;
    throw invalidField('return_url', 'must lead to this gateway or an origin listed in payments.return_origins',
      `Invalid request body: return_url: its origin must be this gateway's (${own}) or one listed in payments.return_origins.`);
  }

  async checkout(accountId: string, amountNano: bigint, returnUrl?: string, baseUrl?: string): Promise<{ url: string; session_id: string; amount: number }> {
    const amount = checkCents(amountNano, 'amount', MIN_TOPUP, MAX_TOPUP, 'must be from 5 to 1000 dollars, in whole cents');
    const base = baseUrl?.replace(/\/+$/, '') ?? this.requestBase(undefined);
    this.checkReturn(returnUrl, base);
    const provider = await this.provider;
    const currency = this.s.config.payments.currency;
    const successUrl = returnUrl ? withSessionParam(returnUrl, 'session_id') : `${base}/console/billing?paid={CHECKOUT_SESSION_ID}`;
    const cancelUrl = returnUrl ?? `${base}/console/billing`;
    const customer = (await customerOf(this.s.db, accountId, provider.name))?.customerId ?? null;
    const email = customer ? null : (await accountById(this.s.db, accountId))?.email ?? null;
    const session = await via('start a checkout', () =>
      provider.createCheckout({ accountId, amountCents: nanoToCents(amount), currency, customer, email, successUrl, cancelUrl, baseUrl: base }));
    await insertSession(this.s.db, { id: session.id, accountId, provider: provider.name, mode: 'payment', amount, currency, successUrl, cancelUrl });
    return { url: session.url, session_id: session.id, amount: nanoToDollars(amount) };
  }

  async setupCard(accountId: string, returnUrl?: string, baseUrl?: string): Promise<{ url: string; session_id: string }> {
    const base = baseUrl?.replace(/\/+$/, '') ?? this.requestBase(undefined);
    this.checkReturn(returnUrl, base);
    const provider = await this.provider;
    const currency = this.s.config.payments.currency;
    const successUrl = returnUrl ? withSessionParam(returnUrl, 'session_id') : `${base}/console/billing?done=card`;
    const cancelUrl = returnUrl ?? `${base}/console/billing`;
    let customer = (await customerOf(this.s.db, accountId, provider.name))?.customerId;
    if (!customer) {
      const email = (await accountById(this.s.db, accountId))?.email ?? null;
      const created = await via('create a customer', () => provider.createCustomer(accountId, email));
      customer = await putCustomer(this.s.db, accountId, provider.name, created);
    }
    const session = await via('start saving a card', () => provider.createSetup({ accountId, customer, currency, successUrl, cancelUrl, baseUrl: base }));
    await insertSession(this.s.db, { id: session.id, accountId, provider: provider.name, mode: 'setup', amount: null, currency, successUrl, cancelUrl });
    return { url: session.url, session_id: session.id };
  }
}

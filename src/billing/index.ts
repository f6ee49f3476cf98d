// Billing's public surface: payments (checkout, saving a card), auto top-up settings, the webhook and the sandbox checkout.
import { dollarsToNano, nanoToDollars, NANO_PER_DOLLAR } from '../money.js';
import { log } from '../observe/log.js';
import { type Billing, type BillingDeps, checkCents, invalidField, MAX_TOPUP, MIN_TOPUP, type Payments } from './core.js';
import { receiveWebhook, type Outcome } from './fulfil.js';
import { SandboxProvider } from './sandbox.js';
import { checkoutPage, notFoundPage, successLocation, usd, type Page } from './sandbox-page.js';
import { autoTopupOf, customerOf, putAutoTopup, sessionById } from './store.js';

export type { Payments } from './core.js';
export type { Page } from './sandbox-page.js';

/** What the routes hand in: the gateway's stages, with the Billing it made at start-up. */
export type HasBilling = BillingDeps & { billing: Billing };

export function billing(s: HasBilling): Billing {
  return s.billing;
}

export function payments(s: HasBilling): Payments {
  return s.billing;
}

export interface AutoTopupView { enabled: boolean; threshold: number; amount: number; status: string | null; card: string | null }

/** Settings in dollars (0 when never set), the last charge's status, and the saved card's reference. */
export async function getAutoTopup(s: Pick<BillingDeps, 'db' | 'config'>, accountId: string): Promise<AutoTopupView> {
  const r = await autoTopupOf(s.db, accountId, s.config.payments.provider);
  return { enabled: r.enabled, threshold: nanoToDollars(r.threshold), amount: nanoToDollars(r.amount), status: r.status, card: r.card };
}

const MIN_THRESHOLD = 1n * 10_000_000n;
const MAX_THRESHOLD = 1000n * NANO_PER_DOLLAR;

function dollarsField(text: string, param: string, min: bigint, max: bigint, sentence: string): bigint {
  const m = /^\$?\s*(\d{1,7}(?:\.\d{1,2})?)$/.exec(text.trim().replace(/,/g, ''));
  const msg = `must be a dollar amount from ${usd(min)} to ${usd(max)} with at most two decimals`;
  if (!m) throw invalidField(param, msg, sentence);
  return checkCents(dollarsToNano(m[1]!), param, min, max, msg, sentence);
}

/** Validates and stores the settings (422 naming the field otherwise); saving them also lifts a stop left by a decline. */
export async function setAutoTopup(s: Pick<BillingDeps, 'db'> & { billing?: Billing }, accountId: string, v: { enabled: boolean; threshold: string; amount: string }): Promise<void> {
  const threshold = dollarsField(v.threshold, 'threshold', MIN_THRESHOLD, MAX_THRESHOLD, 'The threshold must be a dollar amount from $0.01 to $1,000, with at most two decimals.');
  const amount = dollarsField(v.amount, 'amount', MIN_TOPUP, MAX_TOPUP, 'The top-up amount must be from $5 to $1,000, with at most two decimals.');
  await putAutoTopup(s.db, accountId, v.enabled, threshold, amount);
  s.billing?.auto.invalidate();
}

/** The webhook route's whole job: verify, fulfil once, say what happened. */
export function handleWebhook(s: HasBilling, raw: Buffer | null, signature: string | undefined): Promise<Outcome> {
  return receiveWebhook(billing(s), raw, signature);
}

export function requestBase(s: HasBilling, host: string | undefined): string {
  return billing(s).requestBase(host);
}

async function sandboxSession(s: HasBilling, id: string) {
  if (s.config.payments.provider !== 'sandbox' || !/^cs_sandbox_[A-Za-z0-9]{8,64}$/.test(id)) return null;
  const row = await sessionById(s.db, id);
  return row && row.provider === 'sandbox' ? row : null;
}

/** GET of the sandbox checkout page. */
export async function sandboxView(s: HasBilling, id: string): Promise<Page> {
  const row = await sandboxSession(s, id);
  return row ? checkoutPage(row) : notFoundPage();
}

/** "Pay" (or "Save card") on the sandbox page: a signed event to the webhook, then off to the success URL. */
export async function sandboxSubmit(s: HasBilling, id: string, body: Buffer | null, host: string | undefined): Promise<Page | { redirect: string }> {
  const row = await sandboxSession(s, id);
  if (!row) return notFoundPage();
  if (row.status === 'paid' || row.status === 'complete') return { redirect: successLocation(row) };
  if (row.status === 'failed' || row.status === 'expired') return checkoutPage(row, 'This checkout has ended; start a new one.', 410);
  const card = new URLSearchParams((body ?? Buffer.alloc(0)).toString('utf8')).get('card_number') ?? '';
  if (!/^[\d\s-]{12,23}$/.test(card)) return checkoutPage(row, 'Enter a card number (the prefilled test card works).', 422);
  const b = billing(s);
  const provider = await b.provider;
  if (!(provider instanceof SandboxProvider)) return notFoundPage();
  b.requestBase(host);
  try {
    const customer = (await customerOf(s.db, row.accountId, 'sandbox'))?.customerId ?? null;
    const r = await provider.complete(row, card, customer, host);
    if (r === 'declined') return checkoutPage(row, 'Your card was declined. (The sandbox test card 4000 0000 0000 0002 always is.)', 402);
  } catch (e) {
    log('error', 'sandbox checkout could not deliver its event', { session: row.id, error: String((e as Error)?.message ?? e) });
    return checkoutPage(row, 'The payment could not be completed; try again.', 502);
  }
  return { redirect: successLocation(row) };
}

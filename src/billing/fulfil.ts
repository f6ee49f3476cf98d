// Webhook fulfilment: verify, skip events already handled, then credit checkouts, save cards and settle auto top-ups.
import { credit } from '../ledger/credit.js';
import { accountById } from '../store/accounts.js';
import type { Nanodollars } from '../money.js';
import { log } from '../observe/log.js';
import type { Billing } from './core.js';
import { invalidEvent } from './signature.js';
import { customerOf, eventSeen, recordEvent, saveCard, sessionById, setSessionStatus } from './store.js';
import { centsToNano, idOf, obj, str, type WebhookEvent } from './types.js';

export type Outcome = 'duplicate' | 'ignored' | 'credited' | 'awaiting_payment' | 'failed' | 'expired' | 'card_saved' | 'declined' | 'unknown';

function toEvent(v: unknown): WebhookEvent {
  const e = obj(v);
  const data = obj(e?.data);
  const object = obj(data?.object);
  const id = str(e?.id);
  const type = str(e?.type);
  if (!e || !id || !type || !object) throw invalidEvent('an event needs id, type and data.object.');
  return { id, type, data: { object } };
}

/**
 * Handles one delivery. Idempotent twice over: by event id (a table of handled events, written last, so a
 * failure midway lets the provider's retry finish the job) and by what each event does (ledger keys).
 */
export async function receiveWebhook(b: Billing, raw: Buffer | null, signature: string | undefined): Promise<Outcome> {
  const provider = await b.provider;
  const event = toEvent(provider.verify(raw ?? Buffer.alloc(0), signature));
  const db = b.s.db;
  if (await eventSeen(db, event.id)) return 'duplicate';
  const outcome = await dispatch(b, event);
  await recordEvent(db, event.id, event.type);
  if (outcome !== 'ignored') log('info', 'billing event', { event: event.id, type: event.type, outcome });
  return outcome;
}

async function dispatch(b: Billing, e: WebhookEvent): Promise<Outcome> {
  const o = e.data.object;
  switch (e.type) {
    case 'checkout.session.completed': return sessionCompleted(b, o);
    case 'checkout.session.async_payment_succeeded': return creditCheckout(b, o);
    case 'checkout.session.async_payment_failed': return sessionEnded(b, o, 'failed');
    case 'checkout.session.expired': return sessionEnded(b, o, 'expired');
    case 'payment_intent.succeeded': return b.auto.succeeded(o);
    case 'payment_intent.payment_failed': return b.auto.failed(o);
    default: return 'ignored';
  }
}

async function sessionCompleted(b: Billing, o: Record<string, unknown>): Promise<Outcome> {
  if (o.mode === 'setup') return cardSaved(b, o);
  if (o.payment_status === 'paid') return creditCheckout(b, o);
  // Bank debits and the like complete unpaid; async_payment_succeeded or _failed follows.
  const row = await ownSession(b, o, 'payment');
  if (!row) return 'unknown';
  await setSessionStatus(b.s.db, row.id, 'awaiting_payment');
  return 'awaiting_payment';
}

async function ownSession(b: Billing, o: Record<string, unknown>, mode: 'payment' | 'setup') {
  const id = str(o.id);
  const row = id ? await sessionById(b.s.db, id) : null;
  if (!row || row.mode !== mode) {
    log('warn', 'billing event for a session Tollgate did not create', { session: id, mode });
    return null;
  }
  const claimed = str(o.client_reference_id) ?? str(obj(o.metadata)?.account_id);
  if (claimed && claimed !== row.accountId) {
    log('error', 'billing event names another account than its session', { session: id });
    return null;
  }
  return row;
}

/**
 * Credits a paid checkout once (the ledger key is the session id, whichever event and however often says so),
 * and only as recorded: the amount and currency the session asked for, nothing a changed event claims.
 */
async function creditCheckout(b: Billing, o: Record<string, unknown>): Promise<Outcome> {
  const row = await ownSession(b, o, 'payment');
  if (!row) return 'unknown';
  const currency = str(o.currency)?.toLowerCase();
  const paid = typeof o.amount_total === 'number' && Number.isSafeInteger(o.amount_total) && o.amount_total >= 0 ? centsToNano(o.amount_total) : null;
  if (currency !== row.currency || paid !== row.amount || row.amount === null) {
    log('error', 'checkout paid another amount or currency than its session asked; not credited', { session: row.id, asked: row.amount, paid, currency });
    return 'unknown';
  }
  const reason = row.provider === 'sandbox' ? 'Top-up (sandbox checkout, no real charge)' : 'Top-up (card)';
  await credit({ db: b.s.db, settler: b.s.settler }, row.accountId, row.amount as Nanodollars, reason, `checkout:${row.id}`);
  await setSessionStatus(b.s.db, row.id, 'paid');
  return 'credited';
}

async function sessionEnded(b: Billing, o: Record<string, unknown>, status: 'failed' | 'expired'): Promise<Outcome> {
  const row = await ownSession(b, o, o.mode === 'setup' ? 'setup' : 'payment');
  if (!row) return 'unknown';
  await setSessionStatus(b.s.db, row.id, status);
  return status;
}

async function cardSaved(b: Billing, o: Record<string, unknown>): Promise<Outcome> {
  const row = await ownSession(b, o, 'setup');
  if (!row) return 'unknown';
  const provider = await b.provider;
  const pm = await provider.setupPaymentMethod(o);
  const customer = idOf(o.customer) ?? (await customerOf(b.s.db, row.accountId, provider.name))?.customerId ?? null;
  if (!pm || !customer) {
    log('error', 'setup session completed without a payment method or customer', { session: row.id });
    return 'unknown';
  }
  if (!(await accountById(b.s.db, row.accountId))) return 'unknown';
  await saveCard(b.s.db, row.accountId, provider.name, customer, pm, row.createdAt);
  await setSessionStatus(b.s.db, row.id, 'complete');
  b.auto.invalidate();
  return 'card_saved';
}

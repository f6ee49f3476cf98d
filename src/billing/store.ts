// The billing tables: checkout sessions, processed webhook events, saved cards, auto top-up state and the charges it made.
import type { Queryable } from '../store/db.js';

export type ProviderName = 'sandbox' | 'stripe';

export interface SessionRow {
  id: string;
  accountId: string;
  provider: ProviderName;
  mode: 'payment' | 'setup';
  amount: bigint | null;
  currency: string;
  status: string;
  successUrl: string;
  cancelUrl: string;
  createdAt: Date;
}

function toSession(r: Record<string, unknown>): SessionRow {
  return {
    id: r.id as string, accountId: r.account_id as string, provider: r.provider as ProviderName, mode: r.mode as 'payment' | 'setup',
    amount: (r.amount_nd as bigint | null) ?? null, currency: r.currency as string, status: r.status as string,
    successUrl: r.success_url as string, cancelUrl: r.cancel_url as string, createdAt: r.created_at as Date,
  };
}

export async function insertSession(db: Queryable, s: Omit<SessionRow, 'status' | 'createdAt'>): Promise<void> {
  await db.query(
    `INSERT INTO billing_sessions (id, account_id, provider, mode, amount_nd, currency, success_url, cancel_url)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [s.id, s.accountId, s.provider, s.mode, s.amount?.toString() ?? null, s.currency, s.successUrl, s.cancelUrl]);
}

export async function sessionById(db: Queryable, id: string): Promise<SessionRow | null> {
  const res = await db.query('SELECT * FROM billing_sessions WHERE id = $1', [id]);
  return res.rows[0] ? toSession(res.rows[0]) : null;
}

/** Moves a session on; a paid or completed session never moves back (events may arrive out of order). */
export async function setSessionStatus(db: Queryable, id: string, status: 'awaiting_payment' | 'paid' | 'failed' | 'expired' | 'complete'): Promise<void> {
  await db.query(
    `UPDATE billing_sessions SET status = $2, completed_at = CASE WHEN $2 IN ('paid', 'complete') THEN now() ELSE completed_at END
      WHERE id = $1 AND status NOT IN ('paid', 'complete')`, [id, status]);
}

export async function eventSeen(db: Queryable, id: string): Promise<boolean> {
  const res = await db.query('SELECT 1 FROM billing_events WHERE id = $1', [id]);
  return (res.rowCount ?? 0) > 0;
}

export async function recordEvent(db: Queryable, id: string, type: string): Promise<void> {
  await db.query('INSERT INTO billing_events (id, type) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', [id, type]);
}

export interface CustomerRow { customerId: string; paymentMethod: string | null }

export async function customerOf(db: Queryable, accountId: string, provider: ProviderName): Promise<CustomerRow | null> {
  const res = await db.query('SELECT customer_id, payment_method FROM billing_customers WHERE account_id = $1 AND provider = $2', [accountId, provider]);
  const r = res.rows[0];
  return r ? { customerId: r.customer_id as string, paymentMethod: (r.payment_method as string | null) ?? null } : null;
}

/** Stores the customer unless one exists already (two instances racing); returns the one that won. */
export async function putCustomer(db: Queryable, accountId: string, provider: ProviderName, customerId: string): Promise<string> {
  await db.query(
    `INSERT INTO billing_customers (account_id, provider, customer_id) VALUES ($1, $2, $3) ON CONFLICT (account_id, provider) DO NOTHING`,
    [accountId, provider, customerId]);
  return (await customerOf(db, accountId, provider))!.customerId;
}

/**
 * Saves the card a setup session produced (the newest session wins when events arrive out of order), and
 * lifts an auto top-up block: a new card is the user's answer to a decline.
 */
export async function saveCard(db: Queryable, accountId: string, provider: ProviderName, customerId: string, paymentMethod: string, sessionCreated: Date): Promise<void> {
  await db.query(
    `INSERT INTO billing_customers (account_id, provider, customer_id, payment_method, card_saved_at) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (account_id, provider) DO UPDATE SET customer_id = EXCLUDED.customer_id, payment_method = EXCLUDED.payment_method,
       card_saved_at = EXCLUDED.card_saved_at
     WHERE billing_customers.card_saved_at IS NULL OR billing_customers.card_saved_at <= EXCLUDED.card_saved_at`,
    [accountId, provider, customerId, paymentMethod, sessionCreated.toISOString()]);
  await unblock(db, accountId);
}

async function unblock(db: Queryable, accountId: string): Promise<void> {
  await db.query(
    `UPDATE auto_topup SET status = CASE WHEN blocked OR retry_at IS NOT NULL THEN NULL ELSE status END, blocked = false, retry_at = NULL,
       updated_at = now() WHERE account_id = $1`, [accountId]);
}

export interface AutoTopupRow {
  enabled: boolean;
  threshold: bigint;
  amount: bigint;
  status: string | null;
  card: string | null;
}

export async function autoTopupOf(db: Queryable, accountId: string, provider: ProviderName): Promise<AutoTopupRow> {
  const res = await db.query(
    `SELECT a.enabled, a.threshold_nd, a.amount_nd, a.status, c.payment_method
       FROM (SELECT $1::text AS id) x
       LEFT JOIN auto_topup a ON a.account_id = x.id
       LEFT JOIN billing_customers c ON c.account_id = x.id AND c.provider = $2`, [accountId, provider]);
  const r = res.rows[0]!;
  return {
    enabled: (r.enabled as boolean | null) ?? false, threshold: (r.threshold_nd as bigint | null) ?? 0n, amount: (r.amount_nd as bigint | null) ?? 0n,
    status: (r.status as string | null) ?? null, card: (r.payment_method as string | null) ?? null,
  };
}

/** New settings; they also lift a block left by a decline (the user has seen it and acted). */
export async function putAutoTopup(db: Queryable, accountId: string, enabled: boolean, threshold: bigint, amount: bigint): Promise<void> {
  await db.query(
    `INSERT INTO auto_topup (account_id, enabled, threshold_nd, amount_nd) VALUES ($1, $2, $3, $4)
     ON CONFLICT (account_id) DO UPDATE SET enabled = EXCLUDED.enabled, threshold_nd = EXCLUDED.threshold_nd, amount_nd = EXCLUDED.amount_nd,
       status = CASE WHEN auto_topup.blocked OR auto_topup.retry_at IS NOT NULL THEN NULL ELSE auto_topup.status END,
       blocked = false, retry_at = NULL, updated_at = now()`,
    [accountId, enabled, threshold.toString(), amount.toString()]);
}

/**
 * Accounts a dip would charge now, with their thresholds: enabled, not stopped, a card saved, no charge in
 * flight. One small query per refresh, however many accounts make requests.
 */
export async function armedAccounts(db: Queryable, provider: ProviderName): Promise<Map<string, bigint>> {
  const res = await db.query(
    `SELECT a.account_id, a.threshold_nd FROM auto_topup a
       JOIN billing_customers c ON c.account_id = a.account_id AND c.provider = $1 AND c.payment_method IS NOT NULL
      WHERE a.enabled AND NOT a.blocked AND (a.retry_at IS NULL OR a.retry_at <= now())
        AND (NOT a.charging OR a.charge_started_at < now() - interval '15 minutes')`, [provider]);
  return new Map(res.rows.map((r) => [r.account_id as string, r.threshold_nd as bigint]));
}

export interface Claim { attempt: bigint; amount: bigint; customerId: string; paymentMethod: string }

/**
 * Claims the next charge when the stored balance is under the threshold: one row update, so of many
 * instances and balance events only one wins. A claim stuck for 15 minutes (a crash) may be taken again
 * under the same attempt, hence the same idempotency key.
 */
export async function claimCharge(db: Queryable, accountId: string, provider: ProviderName): Promise<Claim | null> {
  const res = await db.query(
    `UPDATE auto_topup a SET charging = true, charge_started_at = now(), status = 'processing', status_at = now(), retry_at = NULL, updated_at = now()
       FROM billing_customers c, accounts acct
      WHERE a.account_id = $1 AND c.account_id = a.account_id AND c.provider = $2 AND c.payment_method IS NOT NULL
        AND acct.id = a.account_id AND acct.balance_nd < a.threshold_nd
        AND a.enabled AND NOT a.blocked AND (a.retry_at IS NULL OR a.retry_at <= now())
        AND (NOT a.charging OR a.charge_started_at < now() - interval '15 minutes')
      RETURNING a.attempt, a.amount_nd, c.customer_id, c.payment_method`, [accountId, provider]);
  const r = res.rows[0];
  return r ? { attempt: r.attempt as bigint, amount: r.amount_nd as bigint, customerId: r.customer_id as string, paymentMethod: r.payment_method as string } : null;
}

export async function notePaymentIntent(db: Queryable, accountId: string, attempt: bigint, paymentIntent: string): Promise<void> {
  await db.query('UPDATE auto_topup SET payment_intent = $3 WHERE account_id = $1 AND attempt = $2', [accountId, attempt.toString(), paymentIntent]);
  await db.query('UPDATE billing_charges SET payment_intent = $3 WHERE account_id = $1 AND attempt = $2 AND payment_intent IS NULL',
    [accountId, attempt.toString(), paymentIntent]);
}

export interface ChargeRecord { amount: bigint; currency: string }

/**
 * Records what an attempt charges before the provider is asked (its event may arrive before its answer). A
 * retried attempt keeps what was recorded first, so it asks for the same amount under the same idempotency key.
 */
export async function recordCharge(db: Queryable, accountId: string, attempt: bigint, provider: ProviderName, amount: bigint, currency: string): Promise<ChargeRecord> {
  const res = await db.query(
    `INSERT INTO billing_charges (account_id, attempt, provider, amount_nd, currency) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (account_id, attempt) DO UPDATE SET account_id = billing_charges.account_id
     RETURNING amount_nd, currency`, [accountId, attempt.toString(), provider, amount.toString(), currency]);
  const r = res.rows[0]!;
  return { amount: r.amount_nd as bigint, currency: r.currency as string };
}

/**
 * Whether a payment intent settles a charge Tollgate recorded: same account, attempt, provider, amount and
 * currency, and either no payment intent bound yet (it is bound now) or this one.
 */
export async function matchCharge(db: Queryable, c: { accountId: string; attempt: bigint; provider: ProviderName; paymentIntent: string; amount: bigint; currency: string }): Promise<boolean> {
  const res = await db.query(
    `UPDATE billing_charges SET payment_intent = $4
      WHERE account_id = $1 AND attempt = $2 AND provider = $3 AND (payment_intent IS NULL OR payment_intent = $4)
        AND amount_nd = $5 AND currency = $6
      RETURNING 1`, [c.accountId, c.attempt.toString(), c.provider, c.paymentIntent, c.amount.toString(), c.currency]);
  return (res.rowCount ?? 0) > 0;
}

/** The attempt's money arrived: re-arm for the next dip. */
export async function chargeSucceeded(db: Queryable, accountId: string, attempt: bigint, paymentIntent: string): Promise<void> {
  await db.query(
    `UPDATE auto_topup SET charging = false, status = 'succeeded', status_at = now(), attempt = attempt + 1, payment_intent = $3, updated_at = now()
      WHERE account_id = $1 AND attempt = $2`, [accountId, attempt.toString(), paymentIntent]);
}

/** A final decline: no more charges until the user changes the settings or saves a card. */
export async function chargeDeclined(db: Queryable, accountId: string, attempt: bigint, status: string, paymentIntent: string | null): Promise<void> {
  await db.query(
    `UPDATE auto_topup SET charging = false, blocked = true, status = $3, status_at = now(), attempt = attempt + 1,
       payment_intent = coalesce($4, payment_intent), updated_at = now()
      WHERE account_id = $1 AND attempt = $2`, [accountId, attempt.toString(), status, paymentIntent]);
}

/** The provider could not be reached: retry the same attempt (same idempotency key) a minute later. */
export async function chargeDeferred(db: Queryable, accountId: string, attempt: bigint): Promise<void> {
  await db.query(
    `UPDATE auto_topup SET charging = false, status = 'failed', status_at = now(), retry_at = now() + interval '60 seconds', updated_at = now()
      WHERE account_id = $1 AND attempt = $2 AND charging`, [accountId, attempt.toString()]);
}

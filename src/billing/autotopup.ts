// Auto top-up: on a balance event under the threshold, claim one charge per dip, charge the saved card off-session, settle by webhook.
import { credit } from '../ledger/credit.js';
import type { Nanodollars } from '../money.js';
import { log } from '../observe/log.js';
import type { Billing } from './core.js';
import type { Outcome } from './fulfil.js';
import { armedAccounts, chargeDeclined, chargeDeferred, chargeSucceeded, claimCharge, matchCharge, notePaymentIntent, recordCharge } from './store.js';
import { centsToNano, idOf, nanoToCents, obj, str, type ChargeResult } from './types.js';

/** How old this instance's list of armed accounts may be when a balance event is judged (others change it too). */
const REFRESH_MS = 2000;
const PURPOSE = 'auto_topup';

export class AutoTopup {
  private armed = new Map<string, bigint>();
  private loadedAt = 0;
  private loading: Promise<void> | null = null;
  private generation = 0;
  private readonly charging = new Set<string>();

  constructor(private readonly b: Billing) {}

  /** Called for every committed ledger change on this instance; costs a query only when the list is stale (once per 2 s). */
  onBalance(accountId: string, balance: bigint): void {
    if (this.charging.has(accountId)) return;
    void this.check(accountId, balance).catch((e) => log('error', 'auto top-up check failed', { account_id: accountId, error: String((e as Error)?.stack ?? e) }));
  }

  /** Settings, card or charge state changed here: read the list again before the next decision. */
  invalidate(): void {
    this.generation++;
    this.loadedAt = 0;
  }

  private refresh(): Promise<void> {
    if (!this.loading) {
      const started = Date.now();
      const generation = this.generation;
      this.loading = (async () => {
        try {
          this.armed = await armedAccounts(this.b.s.db, (await this.b.provider).name);
          // A change made while the query ran may be missing from it: then stay stale.
          this.loadedAt = generation === this.generation ? started : 0;
        } finally {
          this.loading = null;
        }
      })();
    }
    return this.loading;
  }

  private async check(accountId: string, balance: bigint): Promise<void> {
    if (Date.now() - this.loadedAt > REFRESH_MS) await this.refresh();
    const threshold = this.armed.get(accountId);
    if (threshold === undefined || balance >= threshold || this.charging.has(accountId)) return;
    this.charging.add(accountId);
    try {
      await this.charge(accountId);
    } finally {
      this.charging.delete(accountId);
      this.invalidate();
    }
  }

  private async charge(accountId: string): Promise<void> {
    const db = this.b.s.db;
    const provider = await this.b.provider;
    const claim = await claimCharge(db, accountId, provider.name);
    if (!claim) return;
    const attempt = claim.attempt;
    // Recorded before the provider is asked: its webhook may come before its answer, and credits only a match.
    const charge = await recordCharge(db, accountId, attempt, provider.name, claim.amount, this.b.s.config.payments.currency);
    const cents = nanoToCents(charge.amount);
    log('info', 'auto top-up charge', { account_id: accountId, attempt, amount: charge.amount });
    let r: ChargeResult;
    try {
      r = await provider.chargeOffSession({
        accountId, customer: claim.customerId, paymentMethod: claim.paymentMethod, amountCents: cents, currency: charge.currency,
        // One key per attempt (and amount): a retry after a lost answer cannot charge twice.
        idempotencyKey: `tollgate-autotopup-${accountId}-${attempt}-${cents}`,
        metadata: { account_id: accountId, tollgate: PURPOSE, attempt: attempt.toString() },
      });
    } catch (e) {
      r = { ok: false, code: 'failed', paymentIntent: null, transient: true, message: String(e) };
    }
    if (r.ok) {
      // Credited by the payment_intent.succeeded webhook, which also re-arms the next charge.
      await notePaymentIntent(db, accountId, attempt, r.paymentIntent);
    } else if (r.transient) {
      log('warn', 'auto top-up charge failed; will retry', { account_id: accountId, attempt, error: r.message });
      await chargeDeferred(db, accountId, attempt);
    } else {
      log('warn', 'auto top-up charge declined; stopped until the settings or the card change', { account_id: accountId, attempt, code: r.code });
      await chargeDeclined(db, accountId, attempt, r.code, r.paymentIntent);
    }
  }

  /**
   * payment_intent.succeeded for a charge Tollgate made and recorded (account, attempt, amount, currency, payment
   * intent): credit once per payment intent, then re-arm. Metadata alone proves nothing: anything on the
   * provider account can carry it.
   */
  async succeeded(o: Record<string, unknown>): Promise<Outcome> {
    const m = ours(o);
    if (!m) return 'ignored';
    const amount = centsOf(typeof o.amount_received === 'number' ? o.amount_received : o.amount);
    if (!(await this.matches(m, amount, o)) || m.attempt === null || amount === null) return 'unknown';
    const reason = this.b.s.config.payments.provider === 'sandbox' ? 'Automatic top-up (sandbox, no real charge)' : 'Automatic top-up (card)';
    await credit({ db: this.b.s.db, settler: this.b.s.settler }, m.accountId, amount as Nanodollars, reason, `topup:${m.id}`);
    await chargeSucceeded(this.b.s.db, m.accountId, m.attempt, m.id);
    this.invalidate();
    return 'credited';
  }

  /** payment_intent.payment_failed for a charge Tollgate made: an authentication request or a decline stops charges until the user acts. */
  async failed(o: Record<string, unknown>): Promise<Outcome> {
    const m = ours(o);
    if (!m || m.attempt === null) return 'ignored';
    if (!(await this.matches(m, centsOf(o.amount), o))) return 'unknown';
    const err = obj(o.last_payment_error);
    const auth = err?.code === 'authentication_required' || err?.decline_code === 'authentication_required';
    const status = auth ? 'authentication_required' : err?.type === 'card_error' ? 'card_declined' : 'failed';
    await chargeDeclined(this.b.s.db, m.accountId, m.attempt, status, m.id);
    this.invalidate();
    return 'declined';
  }

  private async matches(m: { id: string; accountId: string; attempt: bigint | null }, amount: bigint | null, o: Record<string, unknown>): Promise<boolean> {
    const currency = str(o.currency)?.toLowerCase();
    const ok = m.attempt !== null && amount !== null && currency !== undefined && await matchCharge(this.b.s.db, {
      accountId: m.accountId, attempt: m.attempt, provider: (await this.b.provider).name, paymentIntent: m.id, amount, currency,
    });
    if (!ok) log('error', 'payment intent event matches no charge Tollgate made; ignored', { payment_intent: m.id, account_id: m.accountId, amount, currency });
    return ok;
  }
}

/** Whole cents on the wire as nanodollars; null unless a positive safe integer. */
function centsOf(v: unknown): bigint | null {
  return typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? centsToNano(v) : null;
}

/** A payment intent that says Tollgate's auto top-up created it (Checkout's own payment intents do not); `matches` checks it did. */
function ours(o: Record<string, unknown>): { id: string; accountId: string; attempt: bigint | null } | null {
  const md = obj(o.metadata);
  const id = idOf(o.id);
  const accountId = str(md?.account_id);
  if (md?.tollgate !== PURPOSE || !id || !accountId) return null;
  const a = str(md.attempt);
  return { id, accountId, attempt: a && /^\d{1,18}$/.test(a) ? BigInt(a) : null };
}

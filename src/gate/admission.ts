// Admission: balance and ceiling (counting holds and pending debits), rpm and concurrency, then this request's hold.
import { GatewayError, limitsUnavailable, storeUnavailable } from '../errors.js';
import type { KeyRecord } from '../store/keys.js';
import type { StateCache } from './cache.js';
import { invalidKey } from './auth.js';
import type { AdmitOutcome, ExtendOutcome, Limiter, MoneyRefusal, PendingDebit, QuotaAsk, QuotaState } from './limits/types.js';
import { nanoToDecimal } from '../money.js';
import type { Metrics } from '../observe/metrics.js';
import type { Units } from '../ledger/pricing.js';
import { goDuration, hasUsageLimits, quotaAsks, quotaUse, rateHeaders, retryHeaders, usageLimits } from './rate-headers.js';
import type { LocalView } from './local-view.js';
import { limitsOf, spareDepth, Spares, type Spare } from './spares.js';
import { base62 } from '../store/ids.js';

/** An admitted request's place in the limiter: its worst-case amount and its concurrency slot. */
export interface Hold {
  readonly id: string;
  readonly accountId: string;
  readonly keyId: string;
  readonly amount: bigint;
  /** Headers the OpenAI clients read to see their request budget. */
  readonly rateHeaders: Record<string, string>;
  /** Frees the hold: nothing billed. */
  release(): Promise<void>;
  /** Turns the hold into its priced debit (final) or adds a part beside it; resolves once durable. */
  /** Final: the hold becomes the debit. A part: the debit is added and `covered` (default: its amount) comes off the hold. */
  /** `used`: the usage billed, taken from the key's per-minute usage limits (a final gives back what admission reserved first). */
  /** `freed` (a part): the usage reservation its `extend` returned, given back before `used` is taken. */
  settle(debit: PendingDebit, final: boolean, covered?: bigint, used?: Units, freed?: QuotaAsk[]): Promise<void>;
  /** Takes `amount` off the hold (a stretch held for that billed nothing); the slot stays. `freed`: a part's usage reservation, given back. */
  shrink(amount: bigint, freed?: QuotaAsk[]): Promise<void>;
  /** Records what the request has produced so far (billed if this process dies); resolves once written (or failed). */
  progress(debit: PendingDebit): Promise<void>;
  /** Raises the hold by `amount` for a long session's next stretch; refused like admission (402). */
  /** Holds `amount` more under the admission rule; `countsAsRequest` also takes a token of the key's rpm (a session's billed unit). */
  /** `cover`: `amount` is a known cost the balance and ceiling must cover (see `admit`). */
  /**
   * `worst`: the stretch's worst-case usage, reserved under the key's per-minute usage limits (429
   * `rate_limit_exceeded` as admission's when one has too little left); resolves to what was reserved,
   * for the part to hand back as `freed` when it settles or shrinks.
   */
  extend(amount: bigint, opts?: { countsAsRequest?: boolean; cover?: boolean; worst?: Units }): Promise<QuotaAsk[]>;
}

export interface AdmissionDeps {
  cache: StateCache;
  limiter: Limiter;
  metrics: Metrics;
  defaultRpm: number;
  defaultConcurrency: number;
  holdTtlMs: number;
  /**
   * `limits.allow_overdraft`: a known cost is admitted on the specification's minimum alone (balance
   * above zero, ceiling not reached), so one request may take the balance below zero. Off by default.
   */
  allowOverdraft?: boolean;
  /** Holds this instance placed and has not freed yet, and releases still under way. */
  openHolds: { count: number; releasing: Set<Promise<void>> };
  /** With a remote limiter (Redis): what this instance saw of each key's limits (mayOverlap). */
  localView?: LocalView;
  /** Upstream calls started before their admission answered: admitted, and refused (the call abandoned, unbilled). */
  overlap?: { admitted: number; refused: number };
  /** With a remote limiter: holds placed for a key's next request between two of its requests (gate/spares.ts). */
  spares?: Spares;
}

/** The spare holds of a remote limiter that can give a hold back (gate/spares.ts); none for one that cannot. */
export function makeSpares(d: Omit<AdmissionDeps, 'spares'>): Spares | undefined {
  const { limiter } = d;
  if (!limiter.giveBack || !d.localView) return undefined;
  const spares = new Spares(
    (s) => limiter.giveBack!(s.accountId, s.keyId, s.id, s.rpm).catch(() => retryRelease(d, s.accountId, s.id, 1)),
    (keyId) => d.localView?.closed(keyId));
  limiter.onTrouble?.(() => spares.dropAll());
  return spares;
}

/**
 * After a request of `key` holding `amount` ends: when the key is still far from every limit (the local
 * view's rule, as for an early upstream call) and has fewer spares here than its depth (an eighth of its
 * concurrency, at most 8), one is placed for a request to come.
 */
function replenish(d: AdmissionDeps, key: KeyRecord, amount: bigint): void {
  const spares = d.spares;
  if (!spares) return;
  const { rpm, concurrency } = effectiveLimits(key, d);
  const n = spares.wanted(key.id, spareDepth(concurrency));
  // A key with a per-minute usage limit gets none: its admissions reserve under it, which a spare does not.
  if (n === 0 || key.revokedAt || hasUsageLimits(usageLimits(key)) || !farFromLimits(d, key, amount, concurrency)) return;
  // Several placed in one turn go to Redis as one call.
  for (let i = 0; i < n; i++) spares.place(key.id, () => placeSpare(d, key, amount, rpm, concurrency));
}

/** One spare for `key`, admitted by the admission script like any request: the spare, or null when refused. */
async function placeSpare(d: AdmissionDeps, key: KeyRecord, amount: bigint, rpm: number, concurrency: number): Promise<Spare | null> {
  const id = `spare/${base62(16)}`;
  const { balance, spent } = await moneyState(d, key);
  let out: AdmitOutcome;
  try {
    out = await d.limiter.admit({ holdId: id, accountId: key.accountId, keyId: key.id, rpm, concurrency, money: true, hold: amount,
      balance, ceiling: key.spendLimit, spent, ttlMs: d.holdTtlMs, cover: !d.allowOverdraft });
  } catch (e) {
    retryRelease(d, key.accountId, id, 0);
    throw e;
  }
  if (!out.ok) return null;
  d.localView?.admitted(key.id, out.remaining);
  return { id, accountId: key.accountId, keyId: key.id, amount, limits: limitsOf(key, rpm, concurrency), rpm,
    rateHeaders: rateHeaders(rpm, out.remaining, out.resetMs) };
}

export function effectiveLimits(key: KeyRecord, d: { defaultRpm: number; defaultConcurrency: number }): { rpm: number; concurrency: number } {
  return { rpm: key.rpmLimit ?? d.defaultRpm, concurrency: key.concurrencyLimit ?? d.defaultConcurrency };
}

export { goDuration };

/** OpenAI's error type and limit name per usage limit (its 429s say `tokens` for TPM). */
const QUOTA_TYPE = { t: 'tokens', c: 'characters', a: 'audio_seconds' } as const;
const QUOTA_NAME = { t: 'tokens per min (TPM)', c: 'characters per min', a: 'audio seconds per min' } as const;
const shownQ = (dim: 't' | 'c' | 'a', n: number): number => (dim === 'a' ? Math.ceil(n / 1000) : n);

/** The 429 of a worst case above a usage limit itself: it could never be admitted, so not worth a retry. */
function tooLarge(key: KeyRecord, big: QuotaAsk): GatewayError {
  return new GatewayError({ status: 429, code: 'rate_limit_exceeded', type: QUOTA_TYPE[big.dim],
    message: `Request too large for key ${key.prefix}... on ${QUOTA_NAME[big.dim]}: Limit ${shownQ(big.dim, big.limit)}, Requested ${shownQ(big.dim, big.need)}. Ask for less (a shorter input, a lower max_tokens) or raise the key's limit.`,
    headers: { 'x-should-retry': 'false' } });
}

/** The 429 of a usage limit with less than `need` left (an HTTP request's admission or a session part's). */
function quotaRefused(key: KeyRecord, q: QuotaState, need: number, retryMs: number, headers: Record<string, string>): GatewayError {
  return new GatewayError({ status: 429, code: 'rate_limit_exceeded', type: QUOTA_TYPE[q.dim], retryable: true,
    message: `Rate limit reached for key ${key.prefix}... on ${QUOTA_NAME[q.dim]}: Limit ${shownQ(q.dim, q.limit)}, Used ${shownQ(q.dim, q.limit - q.remaining)}, Requested ${shownQ(q.dim, need)}. Please try again in ${goDuration(retryMs)}.`,
    headers });
}

/**
 * A release that did not reach the limiter (Redis unreachable) is tried again in the background for
 * about two minutes: a hold left behind would keep the key's slot and amount taken until its TTL.
 */
function retryRelease(d: AdmissionDeps, accountId: string, holdId: string, tries: number): void {
  if (tries > 30) return;
  setTimeout(() => {
    d.limiter.release(accountId, holdId).catch(() => retryRelease(d, accountId, holdId, tries + 1));
  }, Math.min(5_000, 250 * 2 ** Math.min(tries, 5))).unref();
}

/**
 * The 402 of a money refusal. When what was left is above zero, the request's known cost did not fit:
 * the message says how much it needs and how much is available (as OpenRouter does for an
 * unaffordable max_tokens), in dollars and in nanodollars.
 */
function moneyRefused(key: KeyRecord, r: MoneyRefusal, needed: bigint): GatewayError {
  const short = r.available > 0n;
  const figures = `This request needs up to $${nanoToDecimal(needed)} (${needed} nd); $${nanoToDecimal(r.available)} (${r.available} nd) is available`;
  if (r.reason === 'insufficient_balance') {
    return new GatewayError({ code: 'insufficient_balance', message: short
        ? `${figures} (the balance less requests in flight). Top up, or ask for less (fewer max_tokens, shorter text).`
        : 'Your prepaid balance is used up (or fully held by requests in flight). Top up to continue.' });
  }
  return new GatewayError({ code: 'key_spend_limit_reached', message: short
      ? `${figures} under the ${key.spendLimitPeriod} spend limit of key ${key.prefix}.... Raise the ceiling or use another key, or ask for less.`
      : `The ${key.spendLimitPeriod} spend limit of key ${key.prefix}... is reached. Raise the ceiling or use another key.` });
}

/**
 * For routes that store data rather than spend (file uploads, voice samples): an account whose balance,
 * less its debits not yet committed, is not above zero cannot pay, and is refused with 402.
 */
export async function requireFunds(d: AdmissionDeps, key: KeyRecord): Promise<void> {
  let available: bigint;
  try {
    const { balance } = await moneyState(d, key);
    available = balance.amount - (await d.limiter.pendingOf(key.accountId, key.id)).account;
  } catch {
    throw storeUnavailable();
  }
  if (available <= 0n) {
    d.metrics.rejection('insufficient_balance');
    throw moneyRefused(key, { ok: false, reason: 'insufficient_balance', available }, 0n);
  }
}

/** The spend period a key's ceiling counts over. */
function ceilingPeriod(key: KeyRecord): 'day' | 'month' {
  return key.spendLimitPeriod === 'daily' ? 'day' : 'month';
}

async function moneyState(d: AdmissionDeps, key: KeyRecord) {
  const period = ceilingPeriod(key);
  // Both come from memory once the key and account were seen: awaited only on a first use.
  const b = d.cache.balanceState(key.accountId);
  const s = d.cache.spendState(key.id, period);
  if (!(b instanceof Promise) && !(s instanceof Promise)) return { balance: b, spent: s };
  // Both awaited together: with the store unreachable both reject, and one left unawaited would end the process.
  const [balance, spent] = await Promise.all([b, s]);
  return { balance, spent };
}

/**
 * Whether a request of `amount` (worst case `worst`) is so far from every limit of its key and account,
 * as this instance last saw them, that its upstream call may start while admission places the hold
 * (issue 29: the admission round trip off the critical path). The admission itself is unchanged: a
 * request it refuses is refused, and the caller abandons the call it started, billing nothing. Only
 * with a remote limiter (the in-process one answers without a round trip); see gate/local-view.ts.
 */
export function mayOverlap(d: AdmissionDeps, key: KeyRecord, amount: bigint, worst?: Units): boolean {
  if (!d.localView) return false;
  const { rpm, concurrency } = effectiveLimits(key, d);
  // A spare will admit it at once: nothing to overlap.
  if (d.spares?.fits(key.id, amount, limitsOf(key, rpm, concurrency))) return false;
  return farFromLimits(d, key, amount, concurrency, worst);
}

/**
 * The local view's rule (gate/local-view.ts) on what memory holds of the key and account, under the key's
 * effective `concurrency`: a first use is never far, and nothing is loaded here.
 */
function farFromLimits(d: AdmissionDeps, key: KeyRecord, amount: bigint, concurrency: number, worst?: Units): boolean {
  if (!d.localView) return false;
  const period = ceilingPeriod(key);
  const money = d.cache.cachedMoney(key.accountId, key.id, period);
  if (!money) return false;
  const quotas = quotaAsks(usageLimits(key), worst).length;
  return d.localView.far(key, amount, money.balance, money.spent, concurrency, quotas);
}

/**
 * Admits one request. With `money`, balance > 0 and the key under its ceiling, counting every hold
 * and pending debit of the account (on any instance, with Redis), and this request holds `amount`
 * until it settles. `known`: `amount` is the request's known or bounded cost, and must also fit in
 * what is left of the balance and of the ceiling (402 saying both figures), unless the operator
 * allows an overdraft. Without `money`, only rpm and concurrency apply (unbilled routes).
 */
export async function admit(d: AdmissionDeps, key: KeyRecord, holdId: string, amount: bigint, money = true, known = false, worst?: Units): Promise<Hold> {
  const { rpm, concurrency } = effectiveLimits(key, d);
  const usage = usageLimits(key);
  const quotas = quotaAsks(usage, worst);
  // A worst case above a limit itself could never be admitted: refused at once, and not worth a retry.
  const big = quotas.find((q) => q.need > q.limit);
  if (big) {
    d.metrics.rejection('request_too_large');
    throw tooLarge(key, big);
  }
  // The key's spare, placed after its last request here, admits this one with no round trip.
  if (money && amount > 0n && d.spares && quotas.length === 0) {
    const spare = d.spares.take(key.id, amount, limitsOf(key, rpm, concurrency));
    if (spare) {
      d.openHolds.count++;
      return new AdmittedHold(d, key, spare.id, spare.amount, usage, spare.rateHeaders, true);
    }
  }
  let state;
  try {
    state = money ? await moneyState(d, key)
      : { balance: { amount: 0n, version: 0n }, spent: { period: 'month' as const, start: '', amount: 0n, version: 0n } };
  } catch {
    // A key or account not yet in memory, and the store unreachable.
    throw storeUnavailable();
  }
  const { balance, spent } = state;
  let out: AdmitOutcome;
  try {
    out = await d.limiter.admit({
      holdId, accountId: key.accountId, keyId: key.id, rpm, concurrency, money, hold: money ? amount : 0n,
      balance, ceiling: key.spendLimit, spent, ttlMs: d.holdTtlMs, cover: known && !d.allowOverdraft, ...(quotas.length ? { quotas } : {}),
    });
  } catch {
    // The script may have run and only its answer been lost: a hold placed then must not linger.
    retryRelease(d, key.accountId, holdId, 0);
    d.metrics.rejection('limits_unavailable');
    throw limitsUnavailable();
  }
  if (!out.ok) {
    d.metrics.rejection(out.reason);
    switch (out.reason) {
      case 'insufficient_balance':
      case 'key_spend_limit_reached':
        throw moneyRefused(key, out, amount);
      case 'rate_limit_exceeded':
        throw new GatewayError({ code: 'rate_limit_exceeded', retryable: true,
          message: `Rate limit reached for key ${key.prefix}... on requests per min (RPM): Limit ${rpm}. Please try again in ${goDuration(out.retryMs)}.`,
          headers: { ...rateHeaders(rpm, 0, out.resetMs), ...retryHeaders(out.retryMs) } });
      case 'concurrency_limit_exceeded':
        throw new GatewayError({ code: 'concurrency_limit_exceeded', retryable: true,
          message: `Key ${key.prefix}... already has ${out.inFlight} requests in flight, its limit is ${concurrency}. Retry when one finishes.`,
          // The refused request took no token: the request budget is reported as it stands.
          headers: { ...rateHeaders(rpm, out.remaining, out.resetMs), ...retryHeaders(1000) } });
      case 'quota_exceeded':
        throw quotaRefused(key, out.quota, out.need, out.retryMs, { ...rateHeaders(rpm, out.remaining, out.resetMs, [out.quota]), ...retryHeaders(out.retryMs) });
    }
  }
  d.openHolds.count++;
  d.localView?.admitted(key.id, out.remaining);
  return new AdmittedHold(d, key, holdId, amount, usage, rateHeaders(rpm, out.remaining, out.resetMs, out.quotas), money);
}

/**
 * An admitted request's hold. A class, not an object of closures: one lives as long as each request
 * and stream, and a literal with a getter and eight arrow functions cost a dictionary-mode object,
 * eight closures and their context per open stream (heap snapshots at 9,900 streams: issue 29).
 */
class AdmittedHold implements Hold {
  private open = true;
  private held: bigint;
  /** What admission held for it (a spare placed when it ends holds as much); 0 for an unbilled request. */
  private readonly worst: bigint;
  readonly accountId: string;
  readonly keyId: string;

  constructor(private readonly d: AdmissionDeps, private readonly key: KeyRecord, readonly id: string, amount: bigint,
    private readonly usage: ReturnType<typeof usageLimits>, readonly rateHeaders: Record<string, string>, money: boolean) {
    this.held = amount;
    this.worst = money ? amount : 0n;
    this.accountId = key.accountId;
    this.keyId = key.id;
  }

  /** The request has ended (settled durably, or released): a spare may be placed for the key's next one. */
  private ended(): void {
    if (this.worst > 0n && this.d.spares) replenish(this.d, this.d.cache.keyById(this.keyId) ?? this.key, this.worst);
  }

  get amount(): bigint { return this.held; }

  private close(): boolean {
    if (!this.open) return false;
    this.open = false;
    this.d.openHolds.count--;
    this.d.localView?.closed(this.keyId);
    return true;
  }

  async release(): Promise<void> {
    if (!this.close()) return;
    const { d, accountId, id } = this;
    const p = d.limiter.release(accountId, id)
      .catch(() => retryRelease(d, accountId, id, 1))
      .finally(() => { d.openHolds.releasing.delete(p); });
    d.openHolds.releasing.add(p);
    await p;
    this.ended();
  }

  async settle(debit: PendingDebit, final: boolean, covered = debit.amount, used?: Units, freed?: QuotaAsk[]): Promise<void> {
    if (final && !this.close()) throw new Error(`hold ${this.id} is already closed`);
    if (!final) this.held -= covered < this.held ? covered : this.held;
    const taken = used ? quotaUse(this.usage, used) : [];
    try {
      await this.d.limiter.settle(this.id, debit, final, covered, taken.length ? taken : undefined, !final && freed?.length ? freed : undefined);
    } catch (e) {
      // Not recorded (as far as we know): the caller commits the debit another way; the hold still goes.
      if (final) this.d.limiter.release(this.accountId, this.id).catch(() => retryRelease(this.d, this.accountId, this.id, 1));
      throw e;
    }
    if (final) this.ended();
  }

  progress(debit: PendingDebit): Promise<void> {
    return this.open ? this.d.limiter.progress(this.id, debit) : Promise.resolve();
  }

  async shrink(amount: bigint, freed?: QuotaAsk[]): Promise<void> {
    if (!this.open || (amount <= 0n && !freed?.length)) return;
    const off = amount <= 0n ? 0n : amount < this.held ? amount : this.held;
    this.held -= off;
    // Best effort: a hold (or reservation) left too large only makes admission stricter until the session ends (its release frees all of it).
    await this.d.limiter.shrink(this.accountId, this.id, off, freed?.length ? freed : undefined).catch(() => undefined);
  }

  async extend(more: bigint, opts: { countsAsRequest?: boolean; cover?: boolean; worst?: Units } = {}): Promise<QuotaAsk[]> {
    if (!this.open) throw new Error(`hold ${this.id} is closed`);
    const { d, key } = this;
    // The key as it is now, not as it was when the session opened: a revocation, a lowered ceiling
    // or rpm the change feed has brought applies to the session's next part.
    const now = d.cache.keyById(key.id) ?? key;
    if (now.revokedAt) throw invalidKey(`The API key ${now.prefix}... has been revoked.`);
    const { balance, spent } = await moneyState(d, now);
    const nowRpm = effectiveLimits(now, d).rpm;
    // The stretch's worst case under the key's usage limits as they are now (an HTTP request's admission reserves the same).
    const quotas = quotaAsks(usageLimits(now), opts.worst);
    const big = quotas.find((q) => q.need > q.limit);
    if (big) { d.metrics.rejection('request_too_large'); throw tooLarge(now, big); }
    let r: ExtendOutcome;
    try {
      r = await d.limiter.extend({ holdId: this.id, accountId: key.accountId, keyId: key.id, amount: more, balance, ceiling: now.spendLimit, spent, ttlMs: d.holdTtlMs,
        cover: opts.cover === true && !d.allowOverdraft, ...(opts.countsAsRequest ? { rpm: nowRpm } : {}), ...(quotas.length ? { quotas } : {}) });
    } catch {
      throw limitsUnavailable();
    }
    if (r.ok) { this.held += more; return quotas; }
    d.metrics.rejection(r.reason);
    if (r.reason === 'quota_exceeded') throw quotaRefused(now, r.quota, r.need, r.retryMs, retryHeaders(r.retryMs));
    if (r.reason === 'rate_limit_exceeded') {
      throw new GatewayError({ code: 'rate_limit_exceeded', retryable: true,
        message: `Rate limit reached for key ${key.prefix}... on requests per min (RPM): Limit ${nowRpm}. Please try again in ${goDuration(r.retryMs)}.`,
        headers: retryHeaders(r.retryMs) });
    }
    if (r.reason === 'missing') throw new GatewayError({ code: 'shutting_down', retryable: true, message: 'This session lost its hold; reconnect.' });
    throw moneyRefused(now, r, more);
  }
}

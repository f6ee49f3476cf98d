// A Charge: the worst case held at admission, then the priced usage settled durably (once, or in parts), or released.
import { admit, mayOverlap, type AdmissionDeps, type Hold } from '../gate/admission.js';
import { invalidKey } from '../gate/auth.js';
import type { GatewayError } from '../errors.js';
import type { PendingDebit, QuotaAsk } from '../gate/limits/types.js';
import type { KeyRecord } from '../store/keys.js';
import { base62 } from '../store/ids.js';
import { price, type UnitPrices, type Units } from '../ledger/pricing.js';
import { serializeEntry, type LedgerEntry } from '../ledger/settle.js';
import type { Nanodollars } from '../money.js';
import { log } from '../observe/log.js';
import { isZero, usageRecord, type Usage } from './usage.js';
import type { Committer } from './committer.js';
import type { UnbilledLog } from '../ledger/unbilled.js';
import { pricesRecord } from '../ledger/receipt.js';

/** `unbilled`: where an admitted request that billed nothing is recorded (its free receipt); absent, it is not. */
export interface ChargeDeps { admission: AdmissionDeps; committer: Committer; unbilled?: UnbilledLog }

export interface ChargeSpec {
  key: KeyRecord;
  /** The idempotency key of the debit: the request id (a session id, a batch id + custom id). */
  id: string;
  /**
   * The ledger entry's nonce when every attempt of this debit must be stored once (a batch line run
   * again after a crash); by default each attempt has its own.
   */
  nonce?: string;
  /** What is priced and named in the ledger. */
  model: { id: string; prices: UnitPrices };
  /** The most this exchange can consume: its hold. */
  worst: Units;
  /**
   * `worst` is known or bounded before the request runs (characters to speak, measured audio, a
   * chat's max_tokens): admission refuses it (402) when the available balance or the ceiling's
   * remainder cannot cover it, not only when they are used up.
   */
  known?: boolean;
  /** The ledger entry's reason (the route). */
  reason: string;
  /** The response the admission's rate-limit headers go on (every response after it carries them, errors too). */
  client?: { rateHeaders?: Record<string, string> | null };
}

/** A running record is written at the first output and then at most this often. */
const PROGRESS_EVERY_MS = 1000;

/**
 * Reserve, then return what was used (TensorZero's rate limiter does the same): `open` admits and
 * holds the worst case; `settle` prices the usage and makes the debit durable before it resolves
 * (one Redis script, or one journal write), and the ledger commit follows without anyone waiting
 * on it. Nothing used is ever billed twice: each debit carries the idempotency key and this
 * attempt's nonce, so a retry or a recovery of the same debit is stored once.
 */
export class Charge {
  private progressAt = 0;
  /** The part the last running record was for (none: the whole exchange). */
  private progressSeq: number | undefined;
  private recorded = false;
  /** A debit with a cost was made (settled, or a running record): the request has a receipt in the ledger. */
  private debited = false;
  /** When the charge opened: the receipt's `started_at`. */
  private readonly started = new Date();
  private state: 'open' | 'settled' | 'released' = 'open';
  private unwatch: (() => void) | null = null;
  /** The last part number given out (part.ts): a session's parts are `<id>#1`, `<id>#2`, … in the ledger. */
  private parts = 0;
  /** What this charge has billed so far (every settle's cost). */
  private billedSum = 0n;

  private constructor(private readonly d: ChargeDeps, private readonly spec: ChargeSpec, private readonly hold: Hold,
    /** Unique per attempt: tells a retried settle of this debit from a client reusing its request id. */
    private readonly nonce: string) {}

  static open(d: ChargeDeps, spec: ChargeSpec): Promise<Charge> {
    return Charge.opening(d, spec, price(spec.model.prices, spec.worst));
  }

  /**
   * Opens the charge as `open` does, and says whether the caller may start its upstream call before the
   * admission answers (`early`: the local view finds the request far from every limit; see
   * gate/admission.ts mayOverlap). A caller that does so must, if `charge` rejects, abandon the call:
   * nothing is billed, as for any refused request.
   */
  static begin(d: ChargeDeps, spec: ChargeSpec): { charge: Promise<Charge>; early: boolean } {
    const worst = price(spec.model.prices, spec.worst);
    const early = mayOverlap(d.admission, spec.key, worst, spec.worst);
    const charge = Charge.opening(d, spec, worst);
    if (early) charge.catch(() => undefined); // awaited by the caller once its call has started
    return { charge, early };
  }

  private static async opening(d: ChargeDeps, spec: ChargeSpec, worst: bigint): Promise<Charge> {
    const attempt = base62(12);
    const hold = await admit(d.admission, spec.key, `${spec.id}/${attempt}`, worst, true, spec.known === true, spec.worst);
    if (spec.client) spec.client.rateHeaders = hold.rateHeaders;
    return new Charge(d, spec, hold, spec.nonce ?? attempt);
  }

  get rateHeaders(): Record<string, string> { return this.hold.rateHeaders; }
  get held(): bigint { return this.hold.amount; }
  /** The unit prices this exchange is billed at. */
  get prices(): UnitPrices { return this.spec.model.prices; }
  get isOpen(): boolean { return this.state === 'open'; }
  /** The debit's idempotency key (a part's ledger key is this, `#`, its number). */
  get id(): string { return this.spec.id; }
  /** The next part's number: 1, 2, … for this charge (a Part takes one at its begin). */
  nextSeq(): number { return ++this.parts; }
  /** What has been billed on this charge so far (its settled parts, or its one settle). */
  get billed(): Nanodollars { return this.billedSum as Nanodollars; }

  /** What `usage` costs at this exchange's prices. */
  cost(u: Usage): Nanodollars { return price(this.spec.model.prices, u); }

  /**
   * Records what has been produced so far, so that if this process dies before `settle`, another
   * instance (or this data dir's next start) bills it. Throttled; skipped while it costs nothing.
   * Resolves once the record is written (or writing it failed: best effort, never rejects); a relay
   * waits for the first one before it forwards the first output, so no output reaches a client unrecorded.
   *
   * A part (`seq`: a session's generation or response) records under that part's own ledger key and
   * this attempt's nonce, the very debit its `settle({ seq })` makes: whichever of the two reaches the
   * ledger is stored once and the other is recognised as the same debit, so a record left over
   * after its part settled bills nothing twice. A session keeps one record at a time (the limiter
   * holds one per hold): parts that record must run one after another. `force`: now, not throttled
   * (the last output of a part).
   */
  progress(u: Usage, opts: { seq?: number; reason?: string; force?: boolean } = {}): Promise<void> {
    if (opts.force ? this.state !== 'open' : !this.progressDue(opts.seq)) return Promise.resolve();
    const cost = this.cost(u);
    if (cost === 0n) return Promise.resolve();
    this.progressAt = Date.now();
    this.progressSeq = opts.seq;
    this.recorded = true;
    this.debited = true;
    return this.hold.progress(this.debit(this.entry(u, cost, {}, opts.seq, opts.reason), opts.seq).debit);
  }

  /** A running record has been written (or attempted) for this charge. */
  get hasRecord(): boolean { return this.recorded; }

  /** A running record would be written now (open, and none written in the last second; a part's first one at once). */
  progressDue(seq?: number): boolean {
    return this.state === 'open' && (seq !== this.progressSeq || Date.now() - this.progressAt >= PROGRESS_EVERY_MS);
  }

  /**
   * Prices `u` and makes its debit durable; the commit to PostgreSQL follows after. Final (the
   * default): the hold is freed. A part (`seq`, not final): the hold stays for what is to come, less
   * `covers` (what was held for this part: by default its cost), so held + billed never counts the
   * same work twice. Zero usage bills nothing (a final one frees the hold). `reason` names a part's kind
   * in the ledger when a session has several (a realtime session's transcriptions and responses).
   */
  /** `freed` (a part): the usage reservation its `extend`s returned, given back to the key's usage limits before `u` is taken. */
  async settle(u: Usage, opts: { seq?: number; final?: boolean; covers?: Nanodollars; extra?: Record<string, unknown>; reason?: string; freed?: QuotaAsk[] } = {}): Promise<{ cost: Nanodollars }> {
    const final = opts.final ?? true;
    if (this.state !== 'open') throw new Error(`charge ${this.spec.id} is ${this.state}`);
    const cost = this.cost(u);
    const covered = opts.covers ?? cost;
    if (isZero(u)) {
      // Nothing to bill: a final settle frees the hold; a part gives back what was held for it.
      // Its free receipt: the client left, or it was cut before producing anything (partial), or it used nothing.
      if (final) await this.release(opts.extra?.client_dropped === true ? 'client_dropped' : u.basis === 'partial' ? 'failed' : 'complete');
      else await this.hold.shrink(covered, opts.freed);
      return { cost };
    }
    if (final) { this.state = 'settled'; this.endWatch(); }
    this.billedSum += cost;
    this.debited = true;
    const entry = this.entry(u, cost, opts.extra ?? {}, opts.seq, opts.reason);
    const { debit } = this.debit(entry, opts.seq);
    try {
      await this.hold.settle(debit, final, covered, u, opts.freed);
    } catch (e) {
      // The durable record could not be written (Redis unreachable): commit now, with the caller waiting.
      log('warn', 'durable settle failed; committing directly', { debit: debit.id, error: String((e as Error)?.message ?? e) });
      // The hold was freed by the failed settle (a final one); a part leaves it for what follows.
      await this.d.committer.commitNow(debit, entry);
      return { cost };
    }
    this.d.committer.enqueue(debit, entry);
    return { cost };
  }

  /**
   * Holds `amount` more for what a long session is about to do (the next response, the next
   * generation), under the admission rule: balance and ceiling are checked again, 402 when spent;
   * with `countsAsRequest` the unit takes a token of the key's rpm too (429 when there is none).
   */
  /** `worst`: the stretch's worst-case usage, reserved under the key's usage limits (429 when one has too little left); resolves to what was reserved. */
  async extend(amount: bigint, opts: { countsAsRequest?: boolean; cover?: boolean; worst?: Usage } = {}): Promise<QuotaAsk[]> {
    if (this.state !== 'open') throw new Error(`charge ${this.spec.id} is ${this.state}`);
    return this.hold.extend(amount, opts);
  }

  /**
   * Stops a session when its credential ends: `stop` is called once, with the 401 a new upgrade would
   * get, when the change feed shows the key revoked (within about a second: cache.ts polls it), or at
   * `expiresAt` (ms: an ephemeral client secret's expiry). The watch ends with the charge.
   */
  watch(stop: (e: GatewayError) => void, expiresAt?: number, expired = 'The credential of this session has expired.'): void {
    if (this.state !== 'open' || this.unwatch) return;
    let done = false;
    const once = (e: GatewayError) => { if (done || this.state !== 'open') return; done = true; this.endWatch(); stop(e); };
    const off = this.d.admission.cache.watchKey(this.spec.key.id, (rec) => once(invalidKey(`The API key ${rec.prefix}... has been revoked.`)));
    let timer: NodeJS.Timeout | undefined;
    if (expiresAt !== undefined) {
      // setTimeout holds at most ~24.8 days; a secret lives two hours at most.
      timer = setTimeout(() => once(invalidKey(expired)), Math.max(0, Math.min(expiresAt - Date.now(), 2 ** 31 - 1)));
      timer.unref();
    }
    this.unwatch = () => { off(); clearTimeout(timer); };
  }

  private endWatch(): void {
    this.unwatch?.();
    this.unwatch = null;
  }

  /**
   * Frees the hold: nothing billed (a failed request, `failed`; or a complete one that used nothing). A
   * request that billed nothing at all is recorded as unbilled, so that it too has a (free) receipt.
   */
  async release(outcome: 'failed' | 'complete' | 'client_dropped' = 'failed'): Promise<void> {
    this.endWatch();
    if (this.state !== 'open') return;
    this.state = 'released';
    if (!this.debited) {
      const k = this.spec.key;
      this.d.unbilled?.record({ accountId: k.accountId, requestId: this.spec.id, keyId: k.id, route: this.spec.reason, model: this.spec.model.id,
        outcome, startedAt: this.started, endedAt: new Date() });
    }
    await this.hold.release();
  }

  private entry(u: Usage, cost: Nanodollars, extra: Record<string, unknown>, seq?: number, reason?: string): LedgerEntry {
    // What the receipt shows beside the units: the prices they were billed at, and when the exchange began.
    const record = usageRecord(u);
    record.prices = pricesRecord(this.spec.model.prices);
    record.started_at = this.started.toISOString();
    return {
      idemKey: seq === undefined ? this.spec.id : `${this.spec.id}#${seq}`, nonce: this.nonce,
      accountId: this.spec.key.accountId, keyId: this.spec.key.id, kind: 'debit', amount: cost,
      reason: reason ?? this.spec.reason, model: this.spec.model.id, at: new Date(),
      usage: Object.assign(record, extra),
    };
  }

  private debit(entry: LedgerEntry, seq: number | undefined): { debit: PendingDebit } {
    return {
      debit: {
        id: seq === undefined ? this.hold.id : `${this.hold.id}#${seq}`, accountId: entry.accountId, keyId: this.spec.key.id,
        amount: entry.amount, entry: serializeEntry(entry),
      },
    };
  }
}

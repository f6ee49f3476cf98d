// A Part: one billed stretch of a session (a generation, a response, a transcription): held, recorded and settled under its own ledger key.
import { nd, type Nanodollars } from '../money.js';
import type { QuotaAsk } from '../gate/limits/types.js';
import { mergeAsks } from '../gate/limits/quota.js';
import type { Charge } from './charge.js';
import type { Usage } from './usage.js';

export interface PartSpec {
  /** The most this part can consume, held at its begin: a usage (priced at the session's prices) or an amount. */
  worst: Usage | Nanodollars;
  /** The part is a billed unit of the session: it takes a token of the key's rpm (429 when there is none). */
  countsAsRequest?: boolean;
  /**
   * `worst` is this part's known cost (the characters of a generation, the seconds of a turn): the
   * balance and the ceiling's remainder must cover it (402 saying both figures), not only be above zero.
   */
  known?: boolean;
  /** The ledger entry's reason when a session has several kinds of parts (default: the session's). */
  reason?: string;
}

/**
 * One billed stretch of a session, on the session's charge. `Part.begin` holds its worst case under
 * the admission rules (balance and ceiling checked again: a GatewayError (src/errors.ts) 402 — or 429 with
 * `countsAsRequest` — that the family renders, and the session goes on or ends as its protocol says);
 * `hold` holds more; `record` writes its running record (billed by recovery if this process dies
 * before `end`); `end` settles what it used (zero usage gives the hold back) under the part's own
 * ledger key `<session id>#<seq>`. A session keeps one running record at a time (the limiter keeps
 * one per hold): parts that record run one after another.
 */
export class Part {
  private heldSum: bigint;
  private recorded = false;
  private state: 'open' | 'ended' = 'open';
  private billedCost: Nanodollars = nd(0n);
  /** What this part reserved under the key's per-minute usage limits (given back at `end`, its use taken instead). */
  private reserved: QuotaAsk[];

  private constructor(private readonly charge: Charge, readonly seq: number, held: bigint, private readonly reason: string | undefined, reserved: QuotaAsk[]) {
    this.heldSum = held;
    this.reserved = reserved;
  }

  /** Holds the part's worst case on the session's charge; throws the admission's GatewayError when refused (nothing held, no number taken). */
  static async begin(charge: Charge, spec: PartSpec): Promise<Part> {
    const amount = amountOf(charge, spec.worst);
    // A worst case given as a usage is also reserved under the key's usage limits (429 like an HTTP request's admission).
    const reserved = await charge.extend(amount, { countsAsRequest: spec.countsAsRequest === true, cover: spec.known === true, ...worstOf(spec.worst) });
    return new Part(charge, charge.nextSeq(), amount, spec.reason, reserved);
  }

  /** The part's ledger idempotency key: its debit, its running records and a recovery of them are stored once under it. */
  get key(): string { return `${this.charge.id}#${this.seq}`; }
  /** What is held for this part now. */
  get held(): Nanodollars { return nd(this.heldSum); }
  get isOpen(): boolean { return this.state === 'open'; }
  /** What `end` billed (zero before it). */
  get billed(): Nanodollars { return this.billedCost; }
  /** What `u` costs at the session's prices. */
  cost(u: Usage): Nanodollars { return this.charge.cost(u); }

  /** Holds more for this part (a sentence to speak inside a response): refused like `begin` (the GatewayError), the part goes on holding what it held. */
  async hold(more: Usage | Nanodollars, opts: { countsAsRequest?: boolean; known?: boolean } = {}): Promise<void> {
    if (this.state !== 'open') throw new Error(`part ${this.key} has ended`);
    const amount = amountOf(this.charge, more);
    const reserved = await this.charge.extend(amount, { countsAsRequest: opts.countsAsRequest === true, cover: opts.known === true, ...worstOf(more) });
    this.heldSum += amount;
    if (reserved.length) this.reserved = mergeAsks(this.reserved, reserved, 1);
  }

  /** A running record would be written now (the part's first at once, then at most once a second). */
  recordDue(): boolean { return this.state === 'open' && this.charge.progressDue(this.seq); }

  /**
   * Records what the part has produced so far (`u`, exactly what `end` would bill now), so that a
   * process killed before `end` is billed that by recovery. Throttled (the first at once, then at most
   * once a second) and skipped while `u` costs nothing. The promise resolves once the first record is
   * written: await it before the output it covers leaves, so no output reaches a client unrecorded.
   * Later records trail by at most a second's output (resolved at once), unless `wait` is set;
   * `force` writes one now, not throttled (the record of a part's last output).
   */
  record(u: Usage, opts: { wait?: boolean; force?: boolean } = {}): Promise<void> {
    if (this.state !== 'open' || (!opts.force && !this.recordDue()) || this.charge.cost(u) === 0n) return Promise.resolve();
    const first = !this.recorded;
    this.recorded = true;
    const written = this.charge.progress(u, { seq: this.seq, force: opts.force === true, ...(this.reason ? { reason: this.reason } : {}) });
    return first || opts.wait ? written : Promise.resolve();
  }

  /** A running record has been written for this part. */
  get hasRecord(): boolean { return this.recorded; }

  /**
   * Settles what the part used (durable before it resolves) and takes what was held for it off the
   * session's hold: zero usage bills nothing and gives the hold back. Once only.
   */
  async end(u: Usage, opts: { extra?: Record<string, unknown>; reason?: string } = {}): Promise<{ cost: Nanodollars }> {
    if (this.state !== 'open') throw new Error(`part ${this.key} has ended`);
    this.state = 'ended';
    const reason = opts.reason ?? this.reason;
    const { cost } = await this.charge.settle(u, { seq: this.seq, final: false, covers: this.held, ...(this.reserved.length ? { freed: this.reserved } : {}),
      ...(opts.extra ? { extra: opts.extra } : {}), ...(reason ? { reason } : {}) });
    this.billedCost = cost;
    return { cost };
  }
}

function worstOf(worst: Usage | Nanodollars): { worst?: Usage } {
  return typeof worst === 'bigint' ? {} : { worst };
}

function amountOf(charge: Charge, worst: Usage | Nanodollars): Nanodollars {
  return typeof worst === 'bigint' ? worst : charge.cost(worst);
}

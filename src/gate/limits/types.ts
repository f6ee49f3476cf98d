// The limiter contract: atomic admission (money, rpm, concurrency, hold), and the durable record of priced debits until they commit.

/** A value as PostgreSQL last committed it, with the change-feed version that orders it. */
export interface Versioned { amount: bigint; version: bigint }

/** The key's spend in the period its ceiling applies to (a UTC day or month starting at `start`). */
export interface PeriodSpend extends Versioned { period: 'day' | 'month'; start: string }

export interface AdmitInput {
  holdId: string;
  accountId: string;
  keyId: string;
  rpm: number;
  concurrency: number;
  /** false: an unbilled request (listing models, key inspection): rpm and concurrency only. */
  money: boolean;
  hold: bigint;             // worst-case cost of this request, nanodollars
  balance: Versioned;       // the account's committed balance as this instance knows it
  ceiling: bigint | null;   // the key's spend limit for its period, or none
  spent: PeriodSpend;       // the key's committed spend in that period as this instance knows it
  ttlMs: number;            // a hold whose owner is alive but lost it is dropped after this
  /**
   * The hold is a known or bounded cost (characters to speak, measured audio, a chat's max_tokens):
   * it must fit in what is left (the balance less other holds and pending debits, and the ceiling's
   * remainder), not only find both above zero.
   */
  cover?: boolean;
  /**
   * The key's per-minute usage limits this request reserves under (only those set): each must have
   * `need` left in its bucket, which it then holds until the hold is dropped (refunded) and settled
   * (what was used taken).
   */
  quotas?: QuotaAsk[];
}

/** A per-minute usage limit: t = tokens (text), c = characters (speech synthesis), a = audio milliseconds (transcription, speech to speech). */
export type QuotaDim = 't' | 'c' | 'a';
/** A limit and this request's worst case under it, in the dimension's unit (audio: milliseconds). */
export interface QuotaAsk { dim: QuotaDim; limit: number; need: number }
/** A bucket after admission: what is left now and the time until it is full again. */
export interface QuotaState { dim: QuotaDim; limit: number; remaining: number; resetMs: number }
/** What a request used under each limit of its key (settled against the buckets after the hold's refund). */
export type QuotaUse = QuotaAsk[];

/** `t:limit:n,c:limit:n`: the string the Redis scripts read. */
export function quotaArg(q: readonly QuotaAsk[] | undefined): string {
  return q ? q.map((x) => `${x.dim}:${x.limit}:${Math.max(0, Math.ceil(x.need))}`).join(',') : '';
}

export type ExtendInput = Pick<AdmitInput, 'holdId' | 'accountId' | 'keyId' | 'balance' | 'ceiling' | 'spent' | 'ttlMs' | 'cover'> & {
  amount: bigint;
  /** The key's rpm, when this extension is a billed unit of a session that counts as a request (it takes a token). */
  rpm?: number;
  /**
   * A session part's worst case under the key's usage limits: each must have `need` left, which the
   * hold then reserves (given back when the part settles or shrinks with it as `freed`, or the hold is dropped).
   */
  quotas?: QuotaAsk[];
};

/** A money refusal: what was left (the balance less holds and pending debits, or the ceiling's remainder) when it was asked. */
export interface MoneyRefusal { ok: false; reason: 'insufficient_balance' | 'key_spend_limit_reached'; available: bigint }

export type ExtendOutcome =
  | { ok: true }
  | MoneyRefusal
  | { ok: false; reason: 'missing' }
  | { ok: false; reason: 'rate_limit_exceeded'; retryMs: number }
  /** A usage limit had less than `need` left: nothing taken (no rpm token, no reservation). */
  | { ok: false; reason: 'quota_exceeded'; quota: QuotaState; need: number; retryMs: number };

export type AdmitOutcome =
  | { ok: true; remaining: number; resetMs: number; quotas?: QuotaState[] }
  | MoneyRefusal
  /** A per-minute usage limit had less than `need` left; rpm and concurrency allowed the request (no token taken). */
  | { ok: false; reason: 'quota_exceeded'; quota: QuotaState; need: number; retryMs: number; remaining: number; resetMs: number }
  | { ok: false; reason: 'rate_limit_exceeded'; remaining: number; resetMs: number; retryMs: number }
  | { ok: false; reason: 'concurrency_limit_exceeded'; inFlight: number; remaining: number; resetMs: number };

/**
 * A priced debit between the response and its ledger commit. Until `committed`, it counts against
 * the account's balance and the key's ceiling at its actual amount, in place of its hold's worst case.
 */
export interface PendingDebit {
  /** The hold it came from plus its part (`#seq`) when a long session settles in parts. */
  id: string;
  accountId: string;
  keyId: string;
  amount: bigint;
  /** The ledger entry, serialised (LedgerEntry with the amount as a string): what recovery commits. */
  entry: string;
}

/** What a group commit left in PostgreSQL, carried to the limiter so admission reads it at once. */
export interface CommittedState {
  balance: Versioned | null;
  spends: { keyId: string; period: 'day' | 'month'; start: string; spent: bigint; version: bigint }[];
}

export interface Limiter {
  readonly kind: 'memory' | 'redis';
  admit(input: AdmitInput): Promise<AdmitOutcome>;
  /**
   * Raises an open hold by `amount` (a long session's next stretch), under the same balance and
   * ceiling rule as admission. `missing`: the hold is gone (expired or taken over).
   */
  extend(input: ExtendInput): Promise<ExtendOutcome>;
  /** Drops a hold: the request billed nothing. */
  release(accountId: string, holdId: string): Promise<void>;
  /**
   * Drops a hold no request used (a spare hold, gate/spares.ts) and gives back the rpm token its
   * admission took, never above `rpm`. Only a remote limiter has it: spares save its round trip.
   */
  giveBack?(accountId: string, keyId: string, holdId: string, rpm: number): Promise<void>;
  /** Calls `f` whenever a connection to the store is lost or a call to it fails (a remote limiter only). */
  onTrouble?(f: () => void): void;
  /**
   * Takes `amount` off an open hold, never below zero, keeping its slot: a session's stretch that
   * was held for and billed nothing (a failed generation or response). A missing hold is no error.
   */
  shrink(accountId: string, holdId: string, amount: bigint, freed?: QuotaUse): Promise<void>;
  /**
   * Replaces a hold by its priced debit (final) or adds a part beside it (not final), durably: in
   * Redis in the same script that frees the hold, in process through an append-only journal.
   * A part takes `covered` off the hold (the stretch of it the part used, never below zero), so a
   * session's hold plus its pending parts never count the same work twice. Resolves once it is
   * durable; the ledger commit comes after. A final settle refunds the hold's reserved quotas; then
   * (final or not) `used` is taken from the key's buckets, in the same script. `freed` (a part): the
   * usage reservation its `extend` made, given back first (a shrink's `freed` likewise).
   */
  settle(holdId: string, debit: PendingDebit, final: boolean, covered?: bigint, used?: QuotaUse, freed?: QuotaUse): Promise<void>;
  /**
   * Records what an open hold has produced so far, so that a crash still bills it. Best effort: the
   * promise resolves once the record is written, or once writing it failed; it never rejects.
   */
  progress(holdId: string, debit: PendingDebit): Promise<void>;
  /** The debits are in the ledger: they stop counting as pending; the committed state replaces them. */
  committed(accountId: string, ids: string[], state: CommittedState): Promise<void>;
  /**
   * Debits left uncommitted by a process that died (Redis: any instance whose heartbeat stopped,
   * with its holds released; in process: the journal of this data dir's previous run). Each is
   * handed to one live instance, which commits it and calls `committed`.
   */
  claimOrphans(): Promise<PendingDebit[]>;
  /** Debits priced and not yet committed, of the account and of one key (what key inspection adds to the ledger's figures). */
  pendingOf(accountId: string, keyId: string): Promise<{ account: bigint; key: bigint }>;
  /** Open holds (for invariants in tests and for /metrics). */
  openHolds(accountId: string): Promise<number>;
  /** Checks the limiter's store answers (Redis: PING); absent for in-process limits, which cannot be unreachable. */
  ping?(): Promise<void>;
  /** Closes; `nothingPending` false leaves this owner's uncommitted debits for a live instance to take over. */
  close(nothingPending?: boolean): Promise<void>;
}

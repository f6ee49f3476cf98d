// Admitted requests that ended with nothing billed, written in groups off the request path: the receipts of free requests.
import type { Db } from '../store/db.js';
import { insertUnbilled, pruneUnbilled, type UnbilledRequest } from '../store/receipts.js';
import { log } from '../observe/log.js';

/** More queued than this (PostgreSQL away for long): further records are dropped, and counted. */
const MAX_QUEUE = 10_000;
const MAX_GROUP = 500;
/** A free request's receipt is kept this long (billed ones live in the ledger for ever). */
export const UNBILLED_KEEP_MS = 90 * 86_400_000;
const PRUNE_EVERY_MS = 3_600_000;

/**
 * Kept 90 days (`UNBILLED_KEEP_MS`), pruned hourly by whichever instance writes.
 * `record` only queues (no await on the request path); one INSERT per group writes what has queued
 * since the last. Best effort: a record lost to a crash or a full queue means that free request's
 * receipt answers 404 — it billed nothing either way.
 */
export class UnbilledLog {
  private queue: UnbilledRequest[] = [];
  private writing: Promise<void> | null = null;
  private prunedAt = 0;
  /** Records dropped (queue full, or a write that failed): a counter for the log. */
  dropped = 0;

  constructor(private readonly db: Db) {}

  record(r: UnbilledRequest): void {
    if (this.queue.length >= MAX_QUEUE) { this.dropped++; return; }
    this.queue.push(r);
    if (!this.writing) this.writing = new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.write());
  }

  /** Resolves once everything recorded so far is written (or dropped). */
  async flush(): Promise<void> {
    while (this.writing) await this.writing;
  }

  private async write(): Promise<void> {
    while (this.queue.length > 0) {
      const group = this.queue.splice(0, MAX_GROUP);
      try {
        await insertUnbilled(this.db, group);
      } catch (e) {
        this.dropped += group.length;
        log('warn', 'unbilled request records not written', { count: group.length, error: String((e as Error)?.message ?? e) });
      }
    }
    // At most hourly, on the writer's own turn: records past their keep are deleted.
    if (Date.now() - this.prunedAt > PRUNE_EVERY_MS) {
      this.prunedAt = Date.now();
      await pruneUnbilled(this.db, new Date(Date.now() - UNBILLED_KEEP_MS)).catch(() => 0);
    }
    this.writing = null;
  }
}

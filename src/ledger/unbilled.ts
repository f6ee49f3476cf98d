// Admitted requests that ended with nothing billed, written in groups off the request path: the receipts of free requests.
import type { Db } from '../store/db.js';
import { insertUnbilled, type UnbilledRequest } from '../store/receipts.js';
import { log } from '../observe/log.js';

/** More queued than this (PostgreSQL away for long): further records are dropped, and counted. */
const MAX_QUEUE = 10_000;
const MAX_GROUP = 500;

/**
 * `record` only queues (no await on the request path); one INSERT per group writes what has queued
 * since the last. Best effort: a record lost to a crash or a full queue means that free request's
 * receipt answers 404 — it billed nothing either way.
 */
export class UnbilledLog {
  private queue: UnbilledRequest[] = [];
  private writing: Promise<void> | null = null;
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
    this.writing = null;
  }
}

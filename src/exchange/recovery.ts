// Recovery: debits a dead process left durable but uncommitted are claimed by a live one and committed, exactly once.
import type { Limiter } from '../gate/limits/types.js';
import { parseEntry } from '../ledger/settle.js';
import { log } from '../observe/log.js';
import type { Committer } from './committer.js';

/** How often a live instance looks for dead ones (with Redis, a dead one is silent for 5 s: found within ~6 s). */
export const RECOVERY_EVERY_MS = 1000;

/**
 * Claims orphaned debits (the limiter decides which: a dead instance's in Redis, the journal's
 * leftovers in process) and hands them to the committer. A debit is stored in the ledger under its
 * idempotency key and its attempt's nonce, so one already committed before its process died is
 * found there and stored again never.
 */
export class Recovery {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  /** Debits taken over from dead instances or replayed from the journal: a counter for /metrics. */
  recovered = 0;

  constructor(private readonly limiter: Limiter, private readonly committer: Committer) {}

  /** Claims once now (a restarted embedded instance replays its journal before serving), then on a timer. */
  async start(): Promise<void> {
    await this.sweep();
    const tick = () => {
      this.running = this.sweep();
      void this.running.finally(() => {
        if (this.timer === undefined) return;
        this.timer = setTimeout(tick, RECOVERY_EVERY_MS);
        this.timer.unref();
      });
    };
    this.timer = setTimeout(tick, RECOVERY_EVERY_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  private async sweep(): Promise<void> {
    try {
      const orphans = await this.limiter.claimOrphans();
      for (const d of orphans) this.committer.enqueue(d, parseEntry(d.entry));
      if (orphans.length > 0) {
        this.recovered += orphans.length;
        log('info', 'recovered uncommitted debits', { count: orphans.length });
      }
    } catch (e) {
      log('warn', 'recovery sweep failed', { error: String((e as Error)?.message ?? e) });
    }
  }
}

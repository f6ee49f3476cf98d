// Deletes expired files (their rows and bytes) every `everyMs`, and uploads a dead process left unfinished.
import type { Queryable } from '../store/db.js';
import { sweepExpired, sweepUploads } from '../store/files.js';
import { log } from '../observe/log.js';

/** An upload older than this is not in progress: no live upload takes an hour to store. */
const STALE_UPLOAD_MS = 3_600_000;

export class FileSweeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | null = null;

  constructor(private readonly db: Queryable, private readonly everyMs: number) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => { void this.sweep(); }, this.everyMs);
    this.timer.unref();
  }

  /** One pass (never two at once); a store outage is logged and tried again at the next. */
  sweep(): Promise<void> {
    this.running ??= (async () => {
      try {
        const expired = await sweepExpired(this.db);
        const stale = await sweepUploads(this.db, STALE_UPLOAD_MS);
        if (expired + stale > 0) log('info', 'files swept', { expired, unfinished_uploads: stale });
      } catch (e) {
        log('warn', 'file sweep failed', { error: (e as Error).message });
      } finally {
        this.running = null;
      }
    })();
    return this.running;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }
}

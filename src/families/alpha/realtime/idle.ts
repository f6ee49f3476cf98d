// A realtime session's inactivity limit (config realtime.idle_timeout_s): no client event and nothing under way for that long ends it.
import { GatewayError } from '../../../errors.js';

/**
 * Fires once when the client has sent nothing for `ms` while `busy()` (a response under way) is
 * false. A client event only stamps the time (audio appends come many a second): the one timer
 * looks at the stamp when it runs and sets itself again for what is left.
 */
export class IdleLimit {
  private last = Date.now();
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly ms: number, private readonly busy: () => boolean, private readonly fire: (e: GatewayError) => void) {
    this.arm(ms);
  }

  touch(): void { this.last = Date.now(); }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private arm(after: number): void {
    this.timer = setTimeout(() => this.check(), after);
    this.timer.unref();
  }

  private check(): void {
    this.timer = null;
    const left = this.last + this.ms - Date.now();
    if (this.busy()) { this.arm(this.ms); return; }
    if (left > 0) { this.arm(left); return; }
    this.fire(new GatewayError({ status: 408, code: 'session_idle_timeout', type: 'invalid_request_error',
      message: `No client event for ${this.ms / 1000} s (realtime.idle_timeout_s): the session is closed.` }));
  }
}

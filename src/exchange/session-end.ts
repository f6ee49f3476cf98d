// A session's end, once: nothing new starts, the parts under way finish (or are cancelled) and settle, the family's last word is sent, the socket closes with its code, the slot is freed.
import type { Charge } from './charge.js';

/** The socket as a session's end needs it (no transport type leaks in here). */
export interface EndingSocket {
  readonly closed: boolean;
  send(data: string): Promise<void>;
  close(code: number, reason?: string): void;
}

/** What a session runs its parts on: `stop` keeps parts not yet begun from running; `idle` resolves once those under way have ended (settled). */
export interface SessionWork {
  stop(): void;
  idle(): Promise<void>;
}

export interface EndHow {
  /** The close code (the family's: 1000 done, 1001 going away, 1008 policy, 1011 upstream failed). */
  code: number;
  /** The close reason; cut to the 123 bytes a close frame holds. */
  reason?: string;
  /** A frame sent before the close (the family's error message), after the parts under way have ended. */
  message?: string;
  /** Cancel the parts under way (their upstream calls stop; each is billed what it produced) instead of letting them finish. */
  cancel?: boolean;
}

/**
 * One end for a session, whatever ends it (the client's close, the protocol's last message, a refusal,
 * a revoked key, the balance running out, the gateway shutting down): `end` runs once, and a second
 * call gets the first's promise. `ending` is true from the first call: a handler stops taking work.
 * `signal` aborts when an end asks to cancel: parts pass it to relayPart.
 */
export class SessionEnd {
  private done: Promise<void> | null = null;
  private readonly abort = new AbortController();

  constructor(private readonly socket: EndingSocket, private readonly work: SessionWork, private readonly charge: () => Charge | null) {}

  get ending(): boolean { return this.done !== null; }
  get signal(): AbortSignal { return this.abort.signal; }

  end(how: EndHow): Promise<void> {
    this.done ??= this.run(how);
    return this.done;
  }

  private async run(how: EndHow): Promise<void> {
    this.work.stop();
    if (how.cancel) this.abort.abort();
    try {
      await this.work.idle();
      if (how.message !== undefined && !this.socket.closed) await this.socket.send(how.message);
      if (!this.socket.closed) this.socket.close(how.code, closeReason(how.reason ?? ''));
    } finally {
      // Every part has settled: what is left held is freed, and with it the key's concurrency slot.
      await this.charge()?.release();
    }
  }
}

/** A close reason within the 123 bytes a close frame holds (cut at a character boundary). */
export function closeReason(reason: string): string {
  if (Buffer.byteLength(reason) <= 123) return reason;
  let r = reason;
  while (Buffer.byteLength(r) > 123) r = r.slice(0, -1);
  return r;
}

// What the parts of a realtime session share: its services, socket, models, charge, configuration and conversation, and how it answers the client.
import type { Services } from '../../../services.js';
import type { ModelConfig } from '../../../config.js';
import type { Charge } from '../../../exchange/charge.js';
import type { GatewayError } from '../../../errors.js';
import type { SessionSocket } from '../../../server/ws.js';
import type { AudioCaps, AudioModels } from './models.js';
import type { Active, Item, Obj, Spoken } from './protocol.js';

export interface SessionContext {
  readonly s: Services;
  readonly socket: SessionSocket;
  /** The session's chat (or realtime) model. */
  readonly model: ModelConfig;
  /** The session's charge: each response and each committed turn settles as a part of it. */
  readonly charge: Charge;
  /** The upgrade's headers, passed to the upstreams as every route passes them. */
  readonly headers: Record<string, string>;
  readonly audio: AudioModels;
  readonly caps: AudioCaps;
  /** The effective GA session configuration. */
  session: Obj;
  /** The conversation, in order. */
  readonly items: Item[];
  /** Each spoken assistant item's audio, by item id: what conversation.item.truncate cuts. */
  readonly spoken: Map<string, Spoken[]>;
  /** Closed, or closing: nothing more is started. */
  ended: boolean;
  /** The response under way. */
  active: Active | null;
  /** The response or transcription under way: a close or a shutdown waits for it to be billed. */
  work: Promise<void>;
  emit(ev: Obj): Promise<void>;
  error(code: string | null, message: string, param?: string | null, clientEventId?: unknown, type?: string): Promise<void>;
  /**
   * A part was refused (balance or ceiling spent, rpm): nothing more runs; once the part under way has
   * settled, the client gets an `error` event saying so and what the session was billed, and the
   * session closes with 1008. Resolves at once (a part calls it from inside the session's work).
   */
  refused(e: GatewayError): Promise<void>;
  /** Runs `f` after the session's work so far (transcriptions and responses run one at a time, in order). */
  queue(what: string, f: () => Promise<void>): Promise<void>;
  /** Checks a response's parameters (an RtError when refused) and queues it behind the session's work. */
  startResponse(r: Obj): void;
}

// A realtime session on the cascade: reads client events in order and hands each to its part (configuration, conversation, audio turns, responses); a close or a shutdown settles what is under way.
import type { Services } from '../../../services.js';
import type { ModelConfig } from '../../../config.js';
import type { Charge } from '../../../exchange/charge.js';
import { closeCode, withMessage, type GatewayError } from '../../../errors.js';
import { alpha } from '../family.js';
import { SessionEnd } from '../../../exchange/session-end.js';
import { log } from '../../../observe/log.js';
import type { SessionHandler, SessionSocket } from '../../../server/ws.js';
import { AudioTurns } from './audio-turns.js';
import type { SessionContext } from './context.js';
import { createItem, deleteItem, retrieveItem, truncateItem } from './conversation.js';
import { audioCaps, type AudioCaps, type AudioModels } from './models.js';
import { respond } from './response.js';
import { planResponse } from './response-plan.js';
import { updatedSession } from './session-config.js';
import { IdleLimit } from './idle.js';
import { abortCalls, billedSoFar, CLIENT_ALIASES, eventOf, GOING_AWAY, rid, RtError, type Active, type Item, type Obj, type Spoken } from './protocol.js';

export class Realtime implements SessionHandler, SessionContext {
  session: Obj;
  readonly items: Item[] = [];
  readonly spoken = new Map<string, Spoken[]>();
  ended = false;
  active: Active | null = null;
  work: Promise<void> = Promise.resolve();
  readonly caps: AudioCaps;
  private readonly turns: AudioTurns;
  private readonly idle: IdleLimit;
  /** The session's one end (exchange/session-end.ts): nothing new starts, the work under way settles, the last word, the close, the slot freed. */
  private readonly ending: SessionEnd;

  /** `expiresAt`: the client secret's expiry (ms), when a secret opened the session. */
  constructor(readonly s: Services, readonly socket: SessionSocket, readonly model: ModelConfig,
    readonly charge: Charge, readonly headers: Record<string, string>, session: Obj, readonly audio: AudioModels, expiresAt?: number, expired?: string) {
    this.session = session;
    this.caps = audioCaps(s, audio);
    this.turns = new AudioTurns(this);
    this.idle = new IdleLimit(s.config.realtime.idleTimeoutMs, () => this.active !== null, (e) => this.stop(e));
    this.ending = new SessionEnd(socket, { stop: () => { this.ended = true; this.idle.stop(); }, idle: () => this.work }, () => charge);
    charge.watch((e) => this.stop(e), expiresAt, expired);
  }

  /**
   * The key was revoked, the client secret expired, or the session sat idle: a response under way
   * stops (billed what it produced, as a cancel is) and ends, the client gets an `error` event saying
   * why, and the socket closes with 1008.
   */
  stop(e: GatewayError): void {
    if (this.ended) return;
    if (this.active) { this.active.cancelled = true; abortCalls(this.active); }
    void this.ending.end({ code: closeCode(e), reason: e.code, message: this.errorFrame(e) });
  }

  opened(): void {
    void this.emit({ type: 'session.created', session: this.session });
  }

  emit(ev: Obj): Promise<void> {
    return this.socket.send(JSON.stringify({ event_id: rid('event'), ...ev }));
  }

  error(code: string | null, message: string, param: string | null = null, clientEventId: unknown = null, type = 'invalid_request_error'): Promise<void> {
    return this.emit({ type: 'error', error: { type, code, message, param, event_id: typeof clientEventId === 'string' ? clientEventId : null } });
  }

  async message(data: Buffer, isBinary: boolean): Promise<void> {
    if (this.ended) return;
    this.idle.touch();
    const m = eventOf(data, isBinary);
    if (!m) return this.error('invalid_json', 'The event is not a JSON object (send JSON text frames); the session goes on.');
    const type = typeof m.type === 'string' ? (CLIENT_ALIASES[m.type] ?? m.type) : null;
    try {
      switch (type) {
        case 'session.update': return await this.update(m);
        case 'conversation.item.create': return await createItem(this, m);
        case 'conversation.item.delete': return await deleteItem(this, m);
        case 'conversation.item.retrieve': return await retrieveItem(this, m);
        case 'response.create': return await this.createResponse(m);
        case 'response.cancel': return await this.cancel(m);
        case 'input_audio_buffer.append': return await this.turns.append(m);
        case 'input_audio_buffer.commit': return await this.turns.commit();
        case 'input_audio_buffer.clear': return await this.turns.clear();
        case 'conversation.item.truncate': return await truncateItem(this, m);
        case 'output_audio_buffer.clear':
          throw new RtError('unsupported_event', 'type', 'output_audio_buffer.clear is for WebRTC and SIP sessions; on a WebSocket, stop playing the audio you have.');
        case null: throw new RtError('invalid_event', 'type', 'The event has no `type`.');
        default: throw new RtError('invalid_event', 'type', `Unknown event type ${JSON.stringify(type).slice(0, 60)}.`);
      }
    } catch (e) {
      if (e instanceof RtError) return this.error(e.code, e.message, e.param, m.event_id, e.type);
      throw e;
    }
  }

  private async update(m: Obj): Promise<void> {
    const u = m.session;
    if (!u || typeof u !== 'object') throw new RtError('invalid_value', 'session', '`session` must be an object.');
    // All or nothing: an error leaves the session as it was.
    const before = JSON.stringify(this.turns.turnDetection);
    this.session = updatedSession(this.session, u as Obj, this.model, this.caps);
    if (JSON.stringify(this.turns.turnDetection) !== before) this.turns.reset();
    await this.emit({ type: 'session.updated', session: this.session });
  }

  private async cancel(m: Obj): Promise<void> {
    const a = this.active;
    if (!a || (typeof m.response_id === 'string' && m.response_id !== a.id)) {
      throw new RtError('response_cancel_not_active', null, 'There is no response in progress to cancel.');
    }
    a.cancelled = true;
    abortCalls(a);
  }

  /** Checks the request now (errors answer at once); the response itself runs beside the message loop, so a cancel can reach it. */
  private async createResponse(m: Obj): Promise<void> {
    if (this.active) throw new RtError('conversation_already_has_active_response', null, `Response ${this.active.id} is still in progress; wait for its response.done or cancel it.`);
    const r = (m.response ?? {}) as Obj;
    if (typeof r !== 'object') throw new RtError('invalid_value', 'response', '`response` must be an object.');
    this.startResponse(r);
  }

  /**
   * Checks a response's parameters and queues it behind the session's work (a transcription, an
   * earlier response); the conversation it answers is read when it runs, so a turn still being
   * transcribed is in it.
   */
  startResponse(r: Obj): void {
    const { a, plan } = planResponse(this, r);
    this.active = a;
    a.finished = this.queue('response', () => respond(this, a, plan));
  }

  queue(what: string, f: () => Promise<void>): Promise<void> {
    const run = this.work.then(f);
    this.work = run.catch((e) => { log('error', `realtime ${what} failed`, { session: this.socket.id, error: String((e as Error)?.stack ?? e) }); });
    return this.work;
  }

  /**
   * Nothing more starts; once the part under way (the one refused inside, if any) has settled, the
   * client hears what the session was billed in all, and the session ends with 1008.
   */
  refused(e: GatewayError): Promise<void> {
    this.ended = true;
    void this.work.then(() => this.ending.end({ code: closeCode(e), reason: e.code, message: this.errorFrame(e, `${e.message} ${billedSoFar(this.charge)}`) }));
    return Promise.resolve();
  }

  /** The family's socket rendering of a session-ending error (the Realtime `error` event), told with `message`. */
  private errorFrame(e: GatewayError, message = e.message): string {
    return alpha.renderSocket(withMessage(e, message), this.socket.id).frame!;
  }

  async closed(): Promise<void> {
    // A response under way stops; what it produced is billed; then the slot is freed.
    if (this.active) { this.active.dropped = true; abortCalls(this.active); }
    await this.ending.end({ code: GOING_AWAY });
  }

  async shutdown(): Promise<void> {
    // A response under way finishes and is billed, then the client hears 1001 (going away).
    await this.ending.end({ code: GOING_AWAY, reason: 'the gateway is shutting down' });
  }
}

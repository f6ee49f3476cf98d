// A realtime pass-through session: client and upstream frames relayed in order, each response a Part (held at response.create, recorded as it streams, settled from its response.done or estimated).
import type { Services } from '../../../services.js';
import type { ModelConfig } from '../../../config.js';
import { CLOSE, closeCode, GatewayError, withMessage } from '../../../errors.js';
import { alpha } from '../family.js';
import type { Charge } from '../../../exchange/charge.js';
import { Part } from '../../../exchange/part.js';
import { SessionEnd } from '../../../exchange/session-end.js';
import { usage, type Usage } from '../../../exchange/usage.js';
import { log } from '../../../observe/log.js';
import { base62 } from '../../../store/ids.js';
import type { SessionHandler, SessionSocket } from '../../../server/ws.js';
import type { WebSocket } from '../../../proxy/ws-upstream.js';
import { OutputCount, realtimeUsage } from '../../../meter/realtime-usage.js';
import { ConversationEstimate } from './passthrough-estimate.js';
import { checkClientEvent, rewriteSessionModel, type Obj } from './passthrough-events.js';
import { billedSoFar, eventOf, withCost } from './protocol.js';
import { IdleLimit } from './idle.js';

const rid = (prefix: string): string => `${prefix}_${base62(16)}`;

/** Close codes: 1001 going away, 1008 a policy refusal (balance, rate, a client that outruns the upstream), 1011 the upstream failed. */
const { GOING_AWAY, POLICY, INTERNAL: UPSTREAM_FAILED } = CLOSE;

/** Client frames queued for the upstream past this: the client sends faster than the upstream reads, and the session closes. */
const UPSTREAM_BACKLOG_LIMIT = 16 * 1024 * 1024;
/** Upstream frames waiting to reach the client: past HIGH the upstream socket is paused, under LOW it reads again. */
const HIGH = 1024 * 1024;
const LOW = 256 * 1024;
/** How long a dropped client's cancelled responses may take to report their usage before they are estimated. */
const CANCEL_WAIT_MS = 5_000;
/** How long a shutdown lets responses under way finish. */
const SHUTDOWN_WAIT_MS = 20_000;

/** A client response.create passed on, its part begun (its worst case held), its response.created not yet seen. */
interface Pending { eventId: string; part: Part }
/** A response under way upstream: its part (null: refused, cancelled upstream, not billed), its output so far. */
interface Live { part: Part | null; out: OutputCount }

export class Passthrough implements SessionHandler {
  private ended = false;
  /** The client left (its socket closed): parts settled from now on are marked so in the ledger. */
  private dropped = false;
  /** Finishing: the upstream's frames are no longer read (what has not reported is estimated). */
  private draining = false;
  private upstreamGone = false;
  private readonly estimate: ConversationEstimate;
  private pending: Pending[] = [];
  private readonly live = new Map<string, Live>();
  /** Upstream frames, handled one at a time in order (a response.done settles before the next frame). */
  private chain: Promise<void>;
  private openedNow: () => void = () => undefined;
  private queued = 0;
  private paused = false;
  private liveEmpty: (() => void)[] = [];
  private finishing: Promise<void> | null = null;
  /** Stopped by the gateway (key revoked, secret expired, idle), not dropped by the client. */
  private stopped = false;
  private readonly idle: IdleLimit;
  private readonly ending: SessionEnd;

  constructor(private readonly s: Services, private readonly socket: SessionSocket, private readonly model: ModelConfig,
    private readonly charge: Charge, private readonly up: WebSocket, expiresAt?: number, private readonly releaseUpstream: () => void = () => undefined,
    /** The model's name on the upstream the socket opened on (upstream_model of its pool entry). */
    private readonly upstreamModel: string = model.upstreamModel) {
    this.estimate = new ConversationEstimate(model, charge.prices);
    this.idle = new IdleLimit(s.config.realtime.idleTimeoutMs, () => this.live.size > 0 || this.pending.length > 0, (e) => this.stop(e));
    this.ending = new SessionEnd(socket, { stop: () => { this.ended = true; this.idle.stop(); }, idle: () => this.finish() }, () => charge);
    charge.watch((e) => this.stop(e), expiresAt, 'The realtime client secret of this session has expired; the session is closed (mint a new secret to open another).');
    // The upstream greets at once (session.created), before the client's socket is open: its frames wait for it.
    this.chain = new Promise<void>((resolve) => { this.openedNow = resolve; });
    up.on('message', (data, isBinary) => {
      const buf = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      this.queued += buf.length;
      if (this.queued > HIGH && !this.paused && !this.ended) { this.paused = true; up.pause(); }
      this.chain = this.chain.then(() => this.fromUpstream(buf, isBinary))
        .catch((e: unknown) => log('error', 'realtime pass-through frame failed', { session: socket.id, error: String((e as Error)?.stack ?? e) }))
        .finally(() => {
          this.queued -= buf.length;
          if (this.paused && this.queued < LOW) { this.paused = false; up.resume(); }
        });
    });
    up.on('close', (code) => {
      this.chain = this.chain.then(() => this.upstreamClosed(code));
    });
    up.on('error', (e) => log('warn', 'realtime upstream socket error', { session: socket.id, error: e.message }));
    up.resume();
  }

  opened(): void { this.openedNow(); }

  /**
   * The key was revoked, the client secret expired, or the session sat idle: responses under way are
   * cancelled upstream and billed what the upstream reports for them, then the client gets an `error`
   * event saying why and the socket closes with 1008.
   */
  stop(e: GatewayError): void {
    if (this.ended) return;
    this.stopped = true;
    this.endWith(closeCode(e), e.code, alpha.renderSocket(e, this.socket.id).frame!);
  }

  private error(code: string | null, message: string, param: string | null = null, clientEventId: unknown = null, type = 'invalid_request_error'): Promise<void> {
    return this.socket.send(this.errorFrame(code, message, clientEventId, type, param));
  }

  private errorFrame(code: string | null, message: string, clientEventId: unknown = null, type = 'invalid_request_error', param: string | null = null): string {
    return JSON.stringify({ event_id: rid('event'), type: 'error', error: { type, code, message, param, event_id: typeof clientEventId === 'string' ? clientEventId : null } });
  }

  /**
   * The session ends (exchange/session-end.ts), once: nothing more is passed on, responses under way
   * are cancelled upstream and billed what they report (or estimated), then `message` and the close.
   * Not awaited: it waits for the upstream frames in hand, and this may be one of them.
   */
  private endWith(code: number, reason: string, message?: string): void {
    void this.ending.end({ code, reason, cancel: true, ...(message ? { message } : {}) });
  }

  /** A client frame: checked where billing or the model is at stake, then passed on as sent (or with its model name rewritten). */
  async message(data: Buffer, isBinary: boolean): Promise<void> {
    if (this.ended || this.upstreamGone) return;
    this.idle.touch();
    const m = eventOf(data, isBinary);
    if (!m) return this.error('invalid_json', 'The event is not a JSON object (send JSON text frames); the session goes on.');
    const refused = checkClientEvent(m, this.model, (name) => this.s.models.find(name)?.id === this.model.id);
    if (refused) return this.error(refused.code, refused.message, refused.param, m.event_id);
    let out: string | Buffer = data;
    this.estimate.client(m);
    switch (m.type) {
      case 'session.update': case 'transcription_session.update': {
        const session = m.session as Obj;
        if (session.model !== undefined) { session.model = this.upstreamModel; out = JSON.stringify(m); }
        break;
      }
      case 'response.create': {
        // A billed unit: balance and ceiling checked again, a token of the key's rpm taken, its worst case held.
        const part = await this.begin((m.response ?? {}) as Obj, m.event_id);
        if (!part) return;
        // The upstream names this event in an error that refuses it: then its hold is given back.
        if (typeof m.event_id !== 'string' || m.event_id === '') { m.event_id = rid('event'); out = JSON.stringify(m); }
        this.pending.push({ eventId: m.event_id as string, part });
        break;
      }
      default: break;
    }
    this.up.send(out, { binary: false });
    if (this.up.bufferedAmount > UPSTREAM_BACKLOG_LIMIT) {
      this.endWith(POLICY, 'client_too_fast', this.errorFrame('client_too_fast', 'The session sends faster than the model upstream reads; it is closed.', null, 'server_error'));
    }
  }

  /**
   * A response's part, begun: its worst case held (balance and ceiling checked again, a token of the
   * key's rpm taken). Refused: the client is told (an error event saying what the session was billed)
   * and the session closes with 1008; null.
   */
  private async begin(r: Obj, clientEventId: unknown): Promise<Part | null> {
    try {
      return await Part.begin(this.charge, { worst: this.estimate.worstCase(r), countsAsRequest: true });
    } catch (e) {
      if (!(e instanceof GatewayError)) throw e;
      this.endWith(closeCode(e), e.code, alpha.renderSocket(withMessage(e, `${e.message} ${billedSoFar(this.charge)}`), this.socket.id, typeof clientEventId === 'string' ? clientEventId : null).frame!);
      return null;
    }
  }

  /** An upstream frame: metered, settled where it ends a response, passed to the client (its model name rewritten). */
  private async fromUpstream(buf: Buffer, isBinary: boolean): Promise<void> {
    if (this.draining) return;
    if (isBinary) { await this.socket.send(buf, true); return; }
    let ev: Obj;
    try {
      ev = JSON.parse(buf.toString('utf8')) as Obj;
      if (!ev || typeof ev !== 'object') throw new Error('not an object');
    } catch {
      await this.socket.send(buf);
      return;
    }
    let out: string | Buffer = buf;
    switch (ev.type) {
      case 'session.created': case 'session.updated': {
        const session = (ev.session ?? {}) as Obj;
        this.estimate.session(session);
        if (rewriteSessionModel(session, this.model)) out = JSON.stringify(ev);
        break;
      }
      case 'response.created': await this.responseCreated(ev); break;
      case 'response.done': out = await this.responseDone(ev) ?? out; break;
      case 'error': {
        const id = (ev.error as Obj | undefined)?.event_id;
        const i = this.pending.findIndex((p) => p.eventId === id);
        if (i >= 0) {
          // The upstream refused a response.create: nothing runs, its hold is given back.
          const [p] = this.pending.splice(i, 1);
          await p!.part.end(usage({ basis: 'exact' }));
        }
        break;
      }
      default: {
        const l = typeof ev.response_id === 'string' ? this.live.get(ev.response_id) : undefined;
        if (l) {
          // A refused response's output is not passed on; a part's output is recorded before it is (the first record awaited).
          if (!l.part) return;
          l.out.add(ev, this.estimate.outBytesPerMs);
          if (l.out.produced) await l.part.record(l.out.usage(this.estimate.prompt));
        }
      }
    }
    await this.socket.send(out);
  }

  /** A response began upstream: it is the part of the oldest response.create passed on, or (one the upstream began itself, server VAD) begins its own. */
  private async responseCreated(ev: Obj): Promise<void> {
    const id = (ev.response as Obj | undefined)?.id;
    if (typeof id !== 'string') return;
    const part = this.pending.shift()?.part ?? await this.begin({}, null);
    // Refused: the response is cancelled upstream, its output not passed on, nothing billed (the session is closing).
    if (!part) this.up.send(JSON.stringify({ type: 'response.cancel', response_id: id }));
    this.live.set(id, { part, out: new OutputCount() });
  }

  /**
   * A response ended: the usage it reports is settled as its part; without one, what it produced is
   * estimated (nothing, if it failed). The usage block the client gets carries the part's `cost`
   * (dollars, exactly its debit): the event to send then (null: as it came).
   */
  private async responseDone(ev: Obj): Promise<string | null> {
    const r = (ev.response ?? {}) as Obj;
    const id = typeof r.id === 'string' ? r.id : '';
    const l = this.live.get(id);
    this.live.delete(id);
    if (this.live.size === 0) for (const w of this.liveEmpty.splice(0)) w();
    const reported = realtimeUsage(r.usage);
    if (reported) this.estimate.prompt.reported(reported);
    if (!l?.part) return null;
    let u: Usage;
    if (reported) u = reported;
    else if (l.out.produced && r.status !== 'failed') u = l.out.usage(this.estimate.prompt);
    else u = usage({ basis: 'exact' });
    const { cost } = await l.part.end(u, { extra: { response_id: id, status: typeof r.status === 'string' ? r.status : null, ...(this.dropped ? { client_dropped: true } : {}) } });
    return r.usage && typeof r.usage === 'object' && !Array.isArray(r.usage) ? withCost(ev, r, cost) : null;
  }

  /** The upstream closed: responses under way are billed what they produced; a client still here hears why, and the session closes. */
  private async upstreamClosed(code: number): Promise<void> {
    this.upstreamGone = true;
    if (this.draining) return;
    await this.settleCut();
    this.endWith(UPSTREAM_FAILED, 'upstream closed', this.errorFrame('upstream_closed', `The model upstream closed the session (code ${code}); what it produced is billed.`, null, 'server_error'));
  }

  /** Responses that will never report: each billed the prompt estimate plus the output its deltas showed. */
  private async settleCut(): Promise<void> {
    for (const [id, l] of [...this.live]) {
      this.live.delete(id);
      const u = l.out.produced ? l.out.usage(this.estimate.prompt) : usage({ basis: 'partial' });
      await l.part?.end(u, { extra: { response_id: id, status: 'cut', ...(this.dropped ? { client_dropped: true } : {}) } });
    }
    // Response.creates the upstream never began: their holds are given back.
    for (const p of this.pending.splice(0)) await p.part.end(usage({ basis: 'exact' }));
    for (const w of this.liveEmpty.splice(0)) w();
  }

  /** Waits until no response is under way upstream, or `ms` pass, or the upstream is gone. */
  private async quiet(ms: number): Promise<void> {
    if (this.live.size === 0 && this.pending.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      new Promise<void>((r) => this.liveEmpty.push(r)),
      new Promise<void>((r) => { timer = setTimeout(r, ms); }),
    ]);
    clearTimeout(timer);
  }

  /**
   * The session's work winding down (its end's `idle`), once: responses under way are cancelled (an
   * end that cancels) or let finish (a shutdown), their usage settled, the upstream closed. The end
   * then says its last word, closes and frees the session's hold.
   */
  private finish(): Promise<void> {
    this.finishing ??= (async () => {
      const cancel = this.ending.signal.aborted;
      this.openedNow();
      if (this.paused) { this.paused = false; this.up.resume(); }
      if (!this.upstreamGone && this.up.readyState === 1) {
        if (cancel) for (const id of this.live.keys()) this.up.send(JSON.stringify({ type: 'response.cancel', response_id: id }));
        await this.quiet(cancel ? CANCEL_WAIT_MS : SHUTDOWN_WAIT_MS);
      }
      this.draining = true;
      await this.chain;
      this.up.terminate();
      // The upstream's slot in its pool is free (its close frees it too: released once).
      this.releaseUpstream();
      await this.settleCut();
    })();
    return this.finishing;
  }

  async closed(): Promise<void> {
    this.dropped = !this.stopped;
    // A dropped client: responses under way are cancelled upstream and billed what the upstream reports for them.
    await this.ending.end({ code: GOING_AWAY, cancel: true });
  }

  async shutdown(): Promise<void> {
    // Responses under way finish and are billed, then the client hears 1001 (going away).
    await this.ending.end({ code: GOING_AWAY, reason: 'the gateway is shutting down' });
  }
}

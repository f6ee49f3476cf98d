// stream-input and multi-stream-input on an ElevenLabs upstream, socket to socket: the client's frames go on as sent (keys taken out), the upstream's come back as sent; Tollgate counts and bills the characters, per context.
import type { Services } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { Part } from '../../exchange/part.js';
import { usage } from '../../exchange/usage.js';
import type { EndHow } from '../../exchange/session-end.js';
import { log } from '../../observe/log.js';
import type { SessionSocket } from '../../server/ws.js';
import { openPooledSocket, type WebSocket } from '../../proxy/ws-upstream.js';
import { beta } from './family.js';
import { upstreamSocketError } from '../upstream-error.js';
import { finalFrame, NORMAL, refusal, refusedBy, UPSTREAM_FAILED, type SpeechSession, type StreamOptions } from './speech-stream.js';

/** Where a client may put its key: never sent upstream (the upstream gets the operator's key). */
const KEY_FIELDS = ['xi_api_key', 'xi-api-key', 'authorization'] as const;

/** Which socket is relayed: one text stream, or several contexts on one socket (each message naming its `context_id`). */
export type NativeKind = 'stream-input' | 'multi-stream-input';

/** One context's billing (the single context '' on stream-input): the characters sent and not yet spoken, and the part that holds them. */
interface Billed {
  part: Part | null;
  pending: number;
  /** What its parts were billed (its final message says it on multi-stream-input). */
  billed: bigint;
}

/** The context a frame names (`context_id`, or `contextId` as the clients' types spell it); '' is the default context. */
function contextOf(m: Record<string, unknown>): string {
  const id = m.context_id ?? m.contextId;
  return typeof id === 'string' ? id : '';
}

/**
 * One relayed session. Billing, per context: the characters sent to a context since the upstream last
 * spoke for it are one Part of the session: the first text frame of such a stretch begins it (its
 * characters held: balance and ceiling checked, 1008 when spent; the session's first counts against the
 * key's rpm as a request does), each further frame holds its characters on it; when the upstream sends
 * that context's audio, the part ends, billed every character sent to it before that audio, durably,
 * before the audio reaches the client. Text the upstream never spoke (the context or the socket closed
 * first) is not billed: its part ends with nothing used. The text of a `close_context` or `close_socket`
 * message is ignored by the upstream (the AsyncAPI description), so it is not counted.
 */
export class NativeStream {
  /** Open contexts by id. */
  private readonly contexts = new Map<string, Billed>();
  /** Contexts the client closed, oldest first per id, until the upstream's final message for each (the id may be opened again meanwhile). */
  private readonly closing = new Map<string, Billed[]>();
  private parts = 0;
  private chain: Promise<void> = Promise.resolve();
  private finished = false;
  /** The upstream sent an error frame: its close that follows says nothing more. */
  private failed = false;

  private constructor(private readonly s: Services, private readonly socket: SessionSocket, private readonly session: SpeechSession,
    private readonly up: WebSocket, private readonly multi: boolean, private readonly onEnd: (how: EndHow) => void, private readonly release: () => void) {
    up.on('message', (data, isBinary) => {
      this.chain = this.chain.then(() => this.fromUpstream(Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data), isBinary)).catch((e: unknown) => {
        log('warn', 'stream-input relay failed', { session: socket.id, error: String((e as Error)?.message ?? e) });
        this.end(refusal(UPSTREAM_FAILED, 'upstream_error: the relay of the speech upstream failed'));
      });
    });
    up.on('close', (code, reason) => {
      // What it sent before closing is delivered (and billed) first.
      void this.chain.then(() => this.upstreamClosed(code, String(reason)));
    });
    up.on('error', () => undefined);
    up.resume();
  }

  /** Opens the upstream's socket for the session's voice (the id the upstream knows) and model; the query goes on but for the key. */
  static async open(s: Services, socket: SessionSocket, session: SpeechSession, o: StreamOptions, kind: NativeKind, onEnd: (how: EndHow) => void): Promise<NativeStream> {
    const q = new URLSearchParams(o.query);
    for (const k of [...KEY_FIELDS, 'model_id']) q.delete(k);
    const { target } = session;
    // On the voice's upstreams of the model's pool (a cloned voice by its id on the upstream that takes the socket), holding its slot until the socket closes.
    const up = await openPooledSocket(s.upstreams, target.places.pool, {
      path: (e) => { q.set('model_id', e.upstreamModel); return `/v1/text-to-speech/${encodeURIComponent(target.cloned ? target.places.voiceAt(e.name) : o.voiceId)}/${kind}?${q.toString()}`; },
      clientHeaders: o.headers, requestId: socket.id, refusal: (res, id) => beta.upstreamError(res, id),
    });
    return new NativeStream(s, socket, session, up.ws, kind === 'multi-stream-input', onEnd, up.release);
  }

  /** A client frame: its characters held on its context, then sent on without any key it carries. False when the hold was refused (the session ends). */
  forward(m: Record<string, unknown>): Promise<boolean> {
    // In turn with the upstream's frames: a part ends at audio only between two client frames, so every
    // character held is on the part that bills it.
    const step = this.chain.then(() => this.forwardNow(m));
    this.chain = step.then(() => undefined, () => undefined);
    return step;
  }

  private async forwardNow(m: Record<string, unknown>): Promise<boolean> {
    if (this.finished) return false;
    const id = this.multi ? contextOf(m) : '';
    const ignored = this.multi && (m.close_context === true || m.close_socket === true);
    const text = !ignored && typeof m.text === 'string' ? m.text : '';
    const characters = text.trim() === '' ? 0 : [...text].length;
    if (characters > 0) {
      const more = usage({ characters, basis: 'exact' });
      let ctx = this.contexts.get(id);
      if (!ctx) { ctx = { part: null, pending: 0, billed: 0n }; this.contexts.set(id, ctx); }
      try {
        if (ctx.part) await ctx.part.hold(more, { known: true });
        else {
          ctx.part = await Part.begin(this.session.charge, { worst: more, known: true, countsAsRequest: this.parts === 0 });
          this.parts++;
        }
      } catch (e) {
        if (e instanceof GatewayError) { this.end(refusedBy(e, this.session.charge.billed)); return false; }
        throw e;
      }
      ctx.pending += characters;
    } else if (this.multi && !ignored && !this.contexts.has(id)) {
      this.contexts.set(id, { part: null, pending: 0, billed: 0n });
    }
    if (this.multi && m.close_context === true) {
      // Its final message comes from the upstream once what was flushed is spoken; a new context of the same id starts afresh.
      const ctx = this.contexts.get(id);
      this.contexts.delete(id);
      if (ctx) this.closing.set(id, [...(this.closing.get(id) ?? []), ctx]);
    }
    const out = { ...m };
    for (const k of KEY_FIELDS) delete out[k];
    this.up.send(JSON.stringify(out));
    return true;
  }

  /** The context an upstream frame is about: one the client closed (its audio comes before its final message), else the open one. */
  private contextFor(id: string): Billed | undefined {
    return this.closing.get(id)?.[0] ?? this.contexts.get(id);
  }

  /** An upstream frame: audio bills what was sent to its context before it, then goes to the client as it came; an error frame ends the session as the family's. */
  private async fromUpstream(data: Buffer, isBinary: boolean): Promise<void> {
    if (this.finished) return;
    if (isBinary) throw new Error('the upstream sent a binary frame');
    const frame = JSON.parse(data.toString('utf8')) as { audio?: unknown; error?: unknown; message?: unknown; code?: unknown; isFinal?: unknown; contextId?: unknown; context_id?: unknown };
    if (typeof frame.error === 'string' && typeof frame.audio !== 'string') {
      this.failed = true;
      this.end(refusedBy(upstreamSocketError(frame, this.socket.id), this.session.charge.billed));
      return;
    }
    const id = this.multi ? (typeof frame.contextId === 'string' ? frame.contextId : typeof frame.context_id === 'string' ? frame.context_id : '') : '';
    const ctx = this.contextFor(id);
    if (typeof frame.audio === 'string' && frame.audio !== '' && ctx?.part) {
      const [part, characters] = [ctx.part, ctx.pending];
      ctx.part = null;
      ctx.pending = 0;
      const { cost } = await part.end(usage({ characters, basis: 'exact' }), { extra: { upstream: 'elevenlabs', ...(this.multi ? { context_id: id } : {}) } });
      ctx.billed += cost;
    }
    if (this.multi && frame.isFinal === true) {
      // The context is done: text it never spoke gives its hold back; its final message says what it was billed.
      const queue = this.closing.get(id);
      if (queue?.length) { queue.shift(); if (queue.length === 0) this.closing.delete(id); } else this.contexts.delete(id);
      await this.settleUnspoken(ctx);
      const fields = JSON.parse(data.toString('utf8')) as Record<string, unknown>;
      delete fields.cost;
      await this.socket.send(finalFrame(fields, ctx?.billed ?? 0n));
      return;
    }
    await this.socket.send(data.toString('utf8'));
  }

  /** The upstream closed: normally (1000) the session ends so; otherwise its close becomes the family's socket error (unless its error frame said it already). */
  private upstreamClosed(code: number, reason: string): void {
    if (this.failed) return;
    if (code === NORMAL) { this.end({ code, reason: reason.slice(0, 120), now: true }); return; }
    if (code === 1005 || code === 1006) { this.end(refusal(UPSTREAM_FAILED, 'upstream_error: the speech upstream broke off')); return; }
    this.end(refusedBy(upstreamSocketError({ code, reason }, this.socket.id), this.session.charge.billed));
  }

  /** Ends the relay once: the upstream socket closes, the session ends as `how` says. */
  end(how: EndHow): void {
    if (this.finished) return;
    this.finished = true;
    if (this.up.readyState <= 1) this.up.close(1000);
    // The upstream's slot in its pool is free (its socket's close frees it too: released once).
    this.release();
    this.onEnd(how);
  }

  private async settleUnspoken(ctx: Billed | undefined): Promise<void> {
    const part = ctx?.part;
    if (!ctx || !part) return;
    ctx.part = null;
    ctx.pending = 0;
    if (part.isOpen) await part.end(usage({ basis: 'exact' }));
  }

  /** Every upstream frame received has been delivered and billed; text never spoken gives its hold back. */
  idle(): Promise<void> {
    return this.chain.then(async () => {
      const all = [...this.contexts.values(), ...[...this.closing.values()].flat()];
      this.contexts.clear();
      this.closing.clear();
      for (const ctx of all) await this.settleUnspoken(ctx);
    });
  }
}

// WS /beta/v1/text-to-speech/{voice_id}/multi-stream-input: several contexts on one socket, each with its own text buffer and chunk schedule, billed per generation.
import type { Services } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { SessionEnd, type EndHow } from '../../exchange/session-end.js';
import { log } from '../../observe/log.js';
import type { KeyRecord } from '../../store/keys.js';
import type { SessionHandler, SessionSocket, SocketRoute } from '../../server/ws.js';
import {
  changesFirst, checkFirstFrame, refusedBy, checkFrameKey, finalFrame, GOING_AWAY, keyOfFrame, NO_WORK, NORMAL, openSpeechSession, POLICY, refusal, refusedFormat, revoked, scheduleOf,
  streamOptions, TextBuffer, voiceOfFrame, type SpeechSession, type StreamOptions, type VoiceFields,
} from './speech-stream.js';
import { Generations, type FrameOut, type Generated } from './generation.js';
import type { GenerationStream } from './produce.js';
import { isNative } from './native.js';
import { NativeStream } from './native-stream-input.js';

const REASON = 'beta.tts.multi_stream_input';
/**
 * ElevenLabs allows five contexts open at once on one socket and closes it (1008,
 * `max_active_conversations`) when a sixth is opened (the message as livekit/agents-js#1985 quotes it).
 */
export const MAX_CONTEXTS = 5;
/** Generations queued past this many: the socket's next message waits (text is not buffered without bound). */
const MAX_QUEUED = 8;

export function multiStreamInputRoute(s: Services): SocketRoute {
  return {
    path: '/v1/text-to-speech/:voice_id/multi-stream-input', name: REASON, scope: 'voice',
    maxMessageBytes: 1024 * 1024,
    keyFrom: { query: ['authorization', 'xi_api_key'] },
    keyInFirstFrame: true,
    async accept(req, key, socket) {
      const o = streamOptions(req);
      const session = key && o.format ? await openSpeechSession(s, key, socket.id, o, REASON) : null;
      return new MultiStreamInput(s, socket, o, key, session);
    },
  };
}

/** One context: its text not yet generated, its schedule, its voice settings, its inactivity timer. */
interface Context {
  id: string | null;
  buffer: TextBuffer;
  voiceSettings: unknown;
  /** The fields its voice_settings add to each generation's upstream body (speech-params.ts). */
  voice: VoiceFields;
  /** Its first message's generation_config, as JSON (a later one must not differ). */
  config: string;
  timer: NodeJS.Timeout | null;
  /** Its last queued generation, delivered: its final message follows it. */
  tail: Promise<void>;
  /** Its audio: one stream across its generations (one Ogg Opus stream per context), made at the first. */
  audio: GenerationStream | null;
  /** How its audio frames are written (naming the context) and sent. */
  out: FrameOut;
  /** What its generations were billed (its final message says it). */
  billed: bigint;
}

class MultiStreamInput implements SessionHandler {
  private started = false;
  private timer: NodeJS.Timeout | null = null;
  /** Open contexts by id ('' is the default context of messages without `context_id`). */
  private readonly contexts = new Map<string, Context>();
  private readonly generations: Generations | null;
  /** The session's one end (a refusal, close_socket, the client's close, a revoked key, shutdown). */
  private readonly end: SessionEnd;
  /** The session relayed to an ElevenLabs upstream's own multi-stream-input (native-stream-input.ts); null otherwise. */
  private native: NativeStream | null = null;

  constructor(private readonly s: Services, private readonly socket: SessionSocket, private readonly o: StreamOptions,
    private key: KeyRecord | null, private session: SpeechSession | null) {
    this.generations = o.format ? new Generations(s, socket.id, o.headers) : null;
    const work = this.generations ?? NO_WORK;
    // A relayed session's parts settle (text never spoken gives its hold back) before the session's hold is freed.
    this.end = new SessionEnd(socket, { stop: () => work.stop(), idle: async () => { await work.idle(); await this.native?.idle(); } }, () => this.session?.charge ?? null);
    this.follow();
  }

  private get ended(): boolean { return this.end.ending; }

  /** Once admitted, the session follows its key: revoked, it stops. */
  private follow(): void {
    this.session?.charge.watch((e) => this.stop(revoked(e)));
  }

  opened(): void {
    const refused = refusedFormat(this.o);
    if (refused) { void this.stop(refused); return; }
    this.arm();
  }

  async message(data: Buffer, isBinary: boolean): Promise<void> {
    if (this.ended) return;
    if (isBinary) return this.error('Binary frames are not part of this protocol: send JSON text frames.', null);
    let m: Record<string, unknown>;
    try {
      const v = JSON.parse(data.toString('utf8')) as unknown;
      if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
      m = v as Record<string, unknown>;
    } catch {
      return this.error('The frame is not a JSON object; the session goes on.', null);
    }
    this.arm();
    if (!this.started) {
      try {
        if (this.key) checkFrameKey(this.key, m);
        else {
          this.key = await keyOfFrame(this.s, m);
          this.session = await openSpeechSession(this.s, this.key, this.socket.id, this.o, REASON);
          this.follow();
        }
        if (this.session && isNative(this.s, this.session.target.model)) {
          // ElevenLabs itself: socket to socket, every context's frames as the client sent them.
          this.native = await NativeStream.open(this.s, this.socket, this.session, this.o, 'multi-stream-input', (how) => { if (!this.socket.closed) void this.stop(how); });
          // The client left while the upstream socket opened: it closes at once (and frees its upstream's slot).
          if (this.socket.closed) { this.native.end({ code: NORMAL, reason: '' }); return; }
        }
      } catch (e) {
        if (e instanceof GatewayError) return void this.stop(refusedBy(e));
        throw e;
      }
      this.started = true;
    }
    if (m.close_socket === true && !this.native) return this.closeSocket();
    const id = m.context_id ?? m.contextId ?? null;
    if (id !== null && typeof id !== 'string') return this.error('`context_id` must be a string.', null);
    const text = m.text ?? null;
    if (text !== null && typeof text !== 'string') return this.error('`text` must be a string.', id);
    if (this.native) return this.relay(m, id);
    if (m.close_context === true) return this.closeContext(id);
    const known = this.contexts.get(id ?? '');
    const ctx = known ?? this.open(id, m);
    if (!ctx) return;
    this.armContext(ctx);
    if (known && changesFirst(known, m)) {
      void this.error('voice_settings and generation_config apply from a context\'s first message only: these were not applied (close the context and open it again to change them).', id);
    }
    // A context's first message is `{"text": " "}`: that space opens it and is not spoken.
    if (text && (known || text.trim() !== '')) ctx.buffer.push(text);
    if (m.flush === true || this.o.autoMode) this.flush(ctx);
    else for (let piece = ctx.buffer.take({ trigger: m.try_trigger_generation === true }); piece !== null; piece = ctx.buffer.take()) this.generate(ctx, piece);
    // Backpressure: a client that sends text faster than it is spoken waits here.
    if (this.generations && this.generations.queued > MAX_QUEUED) await this.generations.idle();
  }

  /** Relayed: what no upstream of the contract takes is refused by name (the message goes no further), the rest goes on as sent. */
  private async relay(m: Record<string, unknown>, id: string | null): Promise<void> {
    try {
      checkFirstFrame(m);
    } catch (e) {
      if (!(e instanceof GatewayError)) throw e;
      return this.error(`${e.code}: ${e.message} The message was not sent.`, id);
    }
    await this.native!.forward(m);
  }

  /** A context's first message: its voice settings and schedule; refused past the context limit. */
  private open(id: string | null, m: Record<string, unknown>): Context | null {
    if (this.contexts.size >= MAX_CONTEXTS) {
      this.refuse(POLICY, `max_active_conversations: Maximum simultaneous contexts per WebSocket connection exceeded (${MAX_CONTEXTS}). Please close an existing context before opening a new one.`);
      return null;
    }
    let buffer: TextBuffer;
    let voice: VoiceFields = {};
    try {
      checkFirstFrame(m);
      buffer = new TextBuffer(scheduleOf(m));
      if (this.session) voice = voiceOfFrame(this.s, this.session, m);
    } catch (e) {
      if (!(e instanceof GatewayError)) throw e;
      void this.error(`${e.code}: ${e.message} The context was not opened.`, id);
      return null;
    }
    const out: FrameOut = {
      frame: (audio, alignment) => JSON.stringify({ audio: audio.toString('base64'), isFinal: false, normalizedAlignment: alignment, alignment, contextId: id }),
      send: (frame) => this.socket.send(frame),
      signal: this.end.signal,
    };
    const ctx: Context = { id, buffer, voiceSettings: m.voice_settings ?? undefined, voice, config: JSON.stringify(m.generation_config ?? null), timer: null,
      tail: Promise.resolve(), audio: null, out, billed: 0n };
    this.contexts.set(id ?? '', ctx);
    return ctx;
  }

  /** Queues every buffered piece of a context (flush, auto_mode, closing the socket). */
  private flush(ctx: Context): void {
    for (let piece = ctx.buffer.take({ all: true }); piece !== null; piece = ctx.buffer.take({ all: true })) this.generate(ctx, piece);
  }

  /** Queues one generation of a context behind the session's others (one at a time: see Generations). */
  private generate(ctx: Context, piece: string): void {
    if (!this.session || !this.generations) return;
    ctx.audio ??= this.session.plan.stream();
    ctx.tail = this.generations.run(this.session, ctx.audio, piece, ctx.voice, ctx.out, (g) => this.generated(ctx, g)).catch((e: unknown) => {
      // Not awaited by the message that queued it: a failure here is logged and ends the session, as a handler's would.
      log('error', 'multi-stream-input generation failed', { session: this.socket.id, error: String((e as Error)?.stack ?? e) });
      this.refuse(1011, 'internal error');
    });
  }

  /** A generation of `ctx` ended (its audio already sent): its cost counted; a refused or failed one ends the session (a refusal saying what it was billed). */
  private generated(ctx: Context, g: Generated): Promise<void> {
    ctx.billed += g.cost;
    if (!g.ok && g.code !== GOING_AWAY) void this.stop(g.refusal ? refusedBy(g.refusal, this.session?.charge.billed ?? 0n) : refusal(g.code, g.reason));
    return Promise.resolve();
  }

  /**
   * `close_context`: no further audio for it. Text not yet generated is dropped (and not billed); what
   * was already queued is spoken, then `{"isFinal": true, "contextId"}`. The id may be opened again at once.
   */
  private closeContext(id: string | null): Promise<void> {
    const ctx = this.contexts.get(id ?? '');
    if (!ctx) return this.error(`There is no open context ${JSON.stringify(id)} to close.`, id);
    this.contexts.delete(id ?? '');
    this.disarmContext(ctx);
    ctx.buffer.clear();
    void ctx.tail.then(() => this.final(ctx)).finally(() => ctx.audio?.close());
    return Promise.resolve();
  }

  /** A context's final message, with `cost`: what its generations were billed, in dollars. */
  private async final(ctx: Context): Promise<void> {
    if (!this.ended) await this.socket.send(finalFrame({ audio: null, isFinal: true, contextId: ctx.id }, ctx.billed));
  }

  /** `close_socket`: every context's text is generated, each context ends with its final message, then a normal close. */
  private async closeSocket(): Promise<void> {
    this.disarm();
    const open = [...this.contexts.values()];
    this.contexts.clear();
    for (const ctx of open) { this.disarmContext(ctx); this.flush(ctx); }
    await this.generations?.idle();
    for (const ctx of open) { await this.final(ctx); ctx.audio?.close(); }
    if (!this.ended) this.refuse(NORMAL, '');
  }

  private async error(message: string, contextId: unknown): Promise<void> {
    await this.socket.send(JSON.stringify({ message, error: 'invalid_message', code: POLICY, ...(typeof contextId === 'string' ? { contextId } : {}) }));
  }

  /** Ends the session at once with `code` (the reason as the family's message when long). */
  private refuse(code: number, reason: string): void {
    void this.stop(refusal(code, reason));
  }

  /** The session's end: timers off, then SessionEnd (nothing new starts, what is under way settles, the close, the slot freed). */
  private stop(how: EndHow): Promise<void> {
    this.disarm();
    this.native?.end(how);
    for (const ctx of this.contexts.values()) this.disarmContext(ctx);
    return this.end.end(how);
  }

  /** The socket closes after `inactivity_timeout` without any message. */
  private arm(): void {
    this.disarm();
    this.timer = setTimeout(() => this.refuse(POLICY, `no message received for ${this.o.inactivityMs / 1000} s (inactivity_timeout)`), this.o.inactivityMs);
    this.timer.unref();
  }

  private disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** A context closes after `inactivity_timeout` without a message to it (`{"text": "", "context_id"}` keeps it alive). */
  private armContext(ctx: Context): void {
    this.disarmContext(ctx);
    ctx.timer = setTimeout(() => { if (this.contexts.get(ctx.id ?? '') === ctx) void this.closeContext(ctx.id); }, this.o.inactivityMs);
    ctx.timer.unref();
  }

  private disarmContext(ctx: Context): void {
    if (ctx.timer) clearTimeout(ctx.timer);
    ctx.timer = null;
  }

  async closed(): Promise<void> {
    // The client left: the one under way stops and is billed the characters of the audio it sent;
    // those queued behind it are not started (nobody is there to hear them); then the slot is freed.
    await this.stop({ code: NORMAL, cancel: true });
    for (const ctx of this.contexts.values()) ctx.audio?.close();
  }

  async shutdown(): Promise<void> {
    await this.stop({ code: GOING_AWAY, reason: 'the gateway is shutting down' });
    for (const ctx of this.contexts.values()) ctx.audio?.close();
  }
}

// WS /beta/v1/text-to-speech/{voice_id}/stream-input: text in as it is written, audio out as it is generated, billed per generation.
import type { Services } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { SessionEnd, type EndHow } from '../../exchange/session-end.js';
import type { KeyRecord } from '../../store/keys.js';
import type { SessionHandler, SessionSocket, SocketRoute } from '../../server/ws.js';
import {
  changesFirst, checkFirstFrame, refusedBy, checkFrameKey, finalFrame, GOING_AWAY, keyOfFrame, NO_WORK, NORMAL, openSpeechSession, POLICY, refusal, refusedFormat, revoked, scheduleOf,
  streamOptions, TextBuffer, voiceOfFrame, DEFAULT_SCHEDULE, type SpeechSession, type StreamOptions, type VoiceFields,
} from './speech-stream.js';
import { Generations, type FrameOut, type Generated } from './generation.js';
import type { GenerationStream } from './produce.js';
import { isNative } from './native.js';
import { NativeStream } from './native-stream-input.js';

const REASON = 'beta.tts.stream_input';

export function streamInputRoute(s: Services): SocketRoute {
  return {
    path: '/v1/text-to-speech/:voice_id/stream-input', name: REASON, scope: 'voice',
    maxMessageBytes: 1024 * 1024,
    keyFrom: { query: ['authorization', 'xi_api_key'] },
    keyInFirstFrame: true,
    async accept(req, key, socket) {
      const o = streamOptions(req);
      // With a key at the upgrade, the voice is resolved and the session admitted now (balance, ceiling,
      // rpm, its concurrency slot): a refusal is the HTTP error.
      const session = key && o.format ? await openSpeechSession(s, key, socket.id, o, REASON) : null;
      return new StreamInput(s, socket, o, key, session);
    },
  };
}

class StreamInput implements SessionHandler {
  private started = false;
  private buffer = new TextBuffer(DEFAULT_SCHEDULE);
  private timer: NodeJS.Timeout | null = null;
  /** The first frame's voice_settings and generation_config as given (a later frame must not change them) and the fields they add upstream. */
  private firstSettings = { voiceSettings: undefined as unknown, config: 'null' };
  private voice: VoiceFields = {};
  private readonly generations: Generations | null;
  /** The socket's audio: one stream across its generations (one Ogg Opus stream), made at the first. */
  private audio: GenerationStream | null = null;
  /** The session's one end (a refusal, `{"text": ""}`, the client's close, a revoked key, shutdown). */
  private readonly end: SessionEnd;
  /** How each audio frame is written and sent. */
  private readonly out: FrameOut;
  /** The session relayed to an ElevenLabs upstream's own stream-input (native-stream-input.ts); null otherwise. */
  private native: NativeStream | null = null;

  constructor(private readonly s: Services, private readonly socket: SessionSocket, private readonly o: StreamOptions,
    private key: KeyRecord | null, private session: SpeechSession | null) {
    this.generations = o.format ? new Generations(s, socket.id, o.headers) : null;
    this.end = new SessionEnd(socket, this.generations ?? NO_WORK, () => this.session?.charge ?? null);
    this.out = {
      frame: (audio, alignment) => JSON.stringify({ audio: audio.toString('base64'), isFinal: null, normalizedAlignment: alignment, alignment }),
      send: (frame) => this.socket.send(frame),
      signal: this.end.signal,
    };
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
    if (isBinary) return this.error('Binary frames are not part of this protocol: send JSON text frames.');
    let m: Record<string, unknown>;
    try {
      const v = JSON.parse(data.toString('utf8')) as unknown;
      if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
      m = v as Record<string, unknown>;
    } catch {
      return this.error('The frame is not a JSON object; the session goes on.');
    }
    if (!this.started) return this.first(m);
    this.arm();
    if (this.native) { await this.native.forward(m); return; }
    const text = m.text;
    if (text !== undefined && typeof text !== 'string') return this.error('`text` must be a string.');
    if (changesFirst(this.firstSettings, m)) {
      // The family applies them from the first message only: said, not silently ignored; the text still goes on.
      void this.error('voice_settings and generation_config apply from the first message only: these were not applied (open a new connection to change them).');
    }
    if (text === '') return this.finish();
    if (typeof text === 'string') this.buffer.push(text);
    if (m.flush === true || this.o.autoMode) return this.flush();
    await this.runSchedule(m.try_trigger_generation === true);
  }

  /** The first frame: `{"text": " ", voice_settings, generation_config, xi_api_key}`. */
  private async first(m: Record<string, unknown>): Promise<void> {
    try {
      if (this.key) checkFrameKey(this.key, m);
      else {
        this.key = await keyOfFrame(this.s, m);
        this.session = await openSpeechSession(this.s, this.key, this.socket.id, this.o, REASON);
        this.follow();
      }
      checkFirstFrame(m);
      this.buffer = new TextBuffer(scheduleOf(m));
      if (this.session && isNative(this.s, this.session.target.model)) {
        // ElevenLabs itself: socket to socket, the frames (voice_settings, generation_config, text) as the client sent them.
        this.native = await NativeStream.open(this.s, this.socket, this.session, this.o, 'stream-input', (how) => { if (!this.socket.closed) void this.stop(how); });
        // The client left while the upstream socket opened: it closes at once (and frees its upstream's slot).
        if (this.socket.closed) { this.native.end({ code: NORMAL, reason: '' }); return; }
      } else if (this.session) this.voice = voiceOfFrame(this.s, this.session, m);
    } catch (e) {
      if (e instanceof GatewayError) return void this.stop(refusedBy(e));
      throw e;
    }
    this.started = true;
    if (this.native) { await this.native.forward(m); return; }
    this.firstSettings = { voiceSettings: m.voice_settings ?? undefined, config: JSON.stringify(m.generation_config ?? null) };
    if (typeof m.text === 'string' && m.text.trim() !== '') {
      this.buffer.push(m.text);
      await this.runSchedule(false);
    }
  }

  /** Generates while the buffer holds the next scheduled length (cut at the last space within it). */
  private async runSchedule(trigger: boolean): Promise<void> {
    for (let piece = this.buffer.take({ trigger }); piece !== null && !this.ended; piece = this.buffer.take()) {
      await this.generate(piece);
    }
  }

  /** Generates everything buffered (flush, auto_mode, the end). */
  private async flush(): Promise<void> {
    for (let piece = this.buffer.take({ all: true }); piece !== null && !this.ended; piece = this.buffer.take({ all: true })) {
      await this.generate(piece);
    }
  }

  /** Synthesizes one piece, its audio sent as it is made (waiting for a slow client); a refused or failed generation ends the session. */
  private async generate(piece: string): Promise<void> {
    if (!this.session || !this.generations) return;
    this.audio ??= this.session.plan.stream();
    await this.generations.run(this.session, this.audio, piece, this.voice, this.out, (g) => this.generated(g));
  }

  /** A generation ended: done, skipped (the session is ending), or the session is refused (what it was billed is said) or failed. */
  private generated(g: Generated): Promise<void> {
    if (g.ok || g.code === GOING_AWAY) return Promise.resolve();
    void this.stop(g.refusal ? refusedBy(g.refusal, this.session?.charge.billed ?? 0n) : refusal(g.code, g.reason));
    return Promise.resolve();
  }

  /**
   * `{"text": ""}`: whatever is buffered is generated, then `{"isFinal": true, "cost"}` (everything the
   * session was billed, in dollars) and a normal close.
   */
  private async finish(): Promise<void> {
    await this.flush();
    if (this.ended) return;
    this.disarm();
    await this.socket.send(finalFrame({ audio: null, isFinal: true, normalizedAlignment: null, alignment: null }, this.session?.charge.billed ?? 0n));
    await this.stop({ code: NORMAL, reason: '' });
  }

  private async error(message: string): Promise<void> {
    await this.socket.send(JSON.stringify({ message, error: 'invalid_message', code: POLICY }));
  }

  /** Ends the session at once with `code` (the reason as the family's message when long). */
  private refuse(code: number, reason: string): void {
    void this.stop(refusal(code, reason));
  }

  /** The session's end: the timer off, then SessionEnd (nothing new starts, what is under way settles, the close, the slot freed). */
  private stop(how: EndHow): Promise<void> {
    this.disarm();
    return this.end.end(how);
  }

  private arm(): void {
    this.disarm();
    this.timer = setTimeout(() => {
      this.refuse(POLICY, `no text received for ${this.o.inactivityMs / 1000} s (inactivity_timeout)`);
    }, this.o.inactivityMs);
    this.timer.unref();
  }

  private disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  async closed(): Promise<void> {
    // Relayed: the upstream's socket closes; audio already on its way is billed only if delivered.
    this.native?.end({ code: NORMAL, reason: '' });
    await this.native?.idle();
    // The client left: the generation under way stops (its upstream call is cancelled) and is billed
    // the characters of the audio it sent, as a dropped HTTP stream is; then the slot is freed.
    await this.stop({ code: NORMAL, cancel: true });
    this.audio?.close();
  }

  async shutdown(): Promise<void> {
    this.native?.end({ code: GOING_AWAY, reason: 'the gateway is shutting down' });
    await this.native?.idle();
    // A generation under way finishes and is billed, then the client hears 1001 (going away).
    await this.stop({ code: GOING_AWAY, reason: 'the gateway is shutting down' });
    this.audio?.close();
  }
}

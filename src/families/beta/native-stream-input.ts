// stream-input on an ElevenLabs upstream, socket to socket: the client's frames go on as sent (keys taken out), the upstream's come back as sent; Tollgate counts and bills the characters.
import type { Services } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { Part } from '../../exchange/part.js';
import { usage } from '../../exchange/usage.js';
import { log } from '../../observe/log.js';
import type { SessionSocket } from '../../server/ws.js';
import { openPooledSocket, type WebSocket } from '../../proxy/ws-upstream.js';
import { beta } from './family.js';
import { POLICY, UPSTREAM_FAILED, type SpeechSession, type StreamOptions } from './speech-stream.js';

/** Where a client may put its key: never sent upstream (the upstream gets the operator's key). */
const KEY_FIELDS = ['xi_api_key', 'xi-api-key', 'authorization'] as const;

/**
 * One relayed session. Billing: the characters sent since the upstream last spoke are one Part of the
 * session: the first text frame of such a stretch begins it (its characters held: balance and ceiling
 * checked, 1008 when spent; the first counts against the key's rpm as a request does), each further
 * frame holds its characters on it; when the upstream sends audio, the part ends, billed every
 * character sent before that audio, durably, before the audio reaches the client. Text the upstream
 * never spoke before the socket closed is not billed (its part ends with nothing used).
 */
export class NativeStream {
  /** The characters sent and not yet spoken, and the part that holds them (null: none pending). */
  private part: Part | null = null;
  private pending = 0;
  private parts = 0;
  private chain: Promise<void> = Promise.resolve();
  private finished = false;

  private constructor(private readonly s: Services, private readonly socket: SessionSocket, private readonly session: SpeechSession,
    private readonly up: WebSocket, private readonly onEnd: (code: number, reason: string) => void, private readonly release: () => void) {
    up.on('message', (data, isBinary) => {
      this.chain = this.chain.then(() => this.fromUpstream(Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data), isBinary)).catch((e: unknown) => {
        log('warn', 'stream-input relay failed', { session: socket.id, error: String((e as Error)?.message ?? e) });
        this.end(UPSTREAM_FAILED, 'upstream_error: the relay of the speech upstream failed');
      });
    });
    up.on('close', (code, reason) => {
      // What it sent before closing is delivered (and billed) first.
      void this.chain.then(() => this.end(code === 1005 || code === 1006 ? UPSTREAM_FAILED : code, String(reason).slice(0, 120)));
    });
    up.on('error', () => undefined);
    up.resume();
  }

  /** Opens the upstream's stream-input for the session's voice (the id the upstream knows) and model; the query goes on but for the key. */
  static async open(s: Services, socket: SessionSocket, session: SpeechSession, o: StreamOptions, onEnd: (code: number, reason: string) => void): Promise<NativeStream> {
    const q = new URLSearchParams(o.query);
    for (const k of [...KEY_FIELDS, 'model_id']) q.delete(k);
    q.set('model_id', session.target.model.upstreamModel);
    const { target } = session;
    // On the voice's upstreams of the model's pool (a cloned voice by its id on the upstream that takes the socket), holding its slot until the socket closes.
    const up = await openPooledSocket(s.upstreams, target.places.pool, {
      path: (e) => `/v1/text-to-speech/${encodeURIComponent(target.cloned ? target.places.voiceAt(e.name) : o.voiceId)}/stream-input?${q.toString()}`,
      clientHeaders: o.headers, requestId: socket.id, refusal: (res, id) => beta.upstreamError(res, id),
    });
    return new NativeStream(s, socket, session, up.ws, onEnd, up.release);
  }

  /** A client frame: its characters held, then sent on without any key it carries. False when the hold was refused (the session ends). */
  forward(m: Record<string, unknown>): Promise<boolean> {
    // In turn with the upstream's frames: a part ends at audio only between two client frames, so every
    // character held is on the part that bills it.
    const step = this.chain.then(() => this.forwardNow(m));
    this.chain = step.then(() => undefined, () => undefined);
    return step;
  }

  private async forwardNow(m: Record<string, unknown>): Promise<boolean> {
    if (this.finished) return false;
    const text = typeof m.text === 'string' ? m.text : '';
    const characters = text.trim() === '' ? 0 : [...text].length;
    if (characters > 0) {
      const more = usage({ characters, basis: 'exact' });
      try {
        if (this.part) await this.part.hold(more, { known: true });
        else {
          this.part = await Part.begin(this.session.charge, { worst: more, known: true, countsAsRequest: this.parts === 0 });
          this.parts++;
        }
      } catch (e) {
        if (e instanceof GatewayError) { this.end(POLICY, `${e.code}: ${e.message}`); return false; }
        throw e;
      }
      this.pending += characters;
    }
    const out = { ...m };
    for (const k of KEY_FIELDS) delete out[k];
    this.up.send(JSON.stringify(out));
    return true;
  }

  /** An upstream frame: audio bills what was sent before it, then goes to the client as it came. */
  private async fromUpstream(data: Buffer, isBinary: boolean): Promise<void> {
    if (this.finished) return;
    if (isBinary) throw new Error('the upstream sent a binary frame');
    const frame = JSON.parse(data.toString('utf8')) as { audio?: unknown };
    if (typeof frame.audio === 'string' && frame.audio !== '' && this.part) {
      const [part, characters] = [this.part, this.pending];
      this.part = null;
      this.pending = 0;
      await part.end(usage({ characters, basis: 'exact' }), { extra: { upstream: 'elevenlabs' } });
    }
    await this.socket.send(data.toString('utf8'));
  }

  /** Ends the relay once: the upstream socket closes, the client hears `code`. */
  end(code: number, reason: string): void {
    if (this.finished) return;
    this.finished = true;
    if (this.up.readyState <= 1) this.up.close(1000);
    // The upstream's slot in its pool is free (its socket's close frees it too: released once).
    this.release();
    this.onEnd(code, reason);
  }

  /** Every upstream frame received has been delivered and billed; text never spoken gives its hold back. */
  idle(): Promise<void> {
    return this.chain.then(async () => {
      const part = this.part;
      this.part = null;
      this.pending = 0;
      if (part?.isOpen) await part.end(usage({ basis: 'exact' }));
    });
  }
}

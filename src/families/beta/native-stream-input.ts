// stream-input on an ElevenLabs upstream, socket to socket: the client's frames go on as sent (keys taken out), the upstream's come back as sent; Tollgate counts and bills the characters.
import type { Services } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { price } from '../../ledger/pricing.js';
import { nd, type Nanodollars } from '../../money.js';
import { usage } from '../../exchange/usage.js';
import { log } from '../../observe/log.js';
import type { SessionSocket } from '../../server/ws.js';
import { openUpstreamSocket, type WebSocket } from '../../proxy/ws-upstream.js';
import { beta } from './family.js';
import { POLICY, UPSTREAM_FAILED, type SpeechSession, type StreamOptions } from './speech-stream.js';

/** Where a client may put its key: never sent upstream (the upstream gets the operator's key). */
const KEY_FIELDS = ['xi_api_key', 'xi-api-key', 'authorization'] as const;

/**
 * One relayed session. Billing: each text frame's characters (whitespace-only frames count none) are
 * held before the frame goes on (balance and ceiling checked, 1008 when spent); when the upstream
 * sends audio, every character sent before it is billed as one part of the session, durably, before
 * that audio reaches the client. Text the upstream never spoke before the socket closed is not billed.
 */
export class NativeStream {
  private seq = 0;
  private pending = 0;
  private pendingHeld: Nanodollars = nd(0n);
  private chain: Promise<void> = Promise.resolve();
  private finished = false;

  private constructor(private readonly s: Services, private readonly socket: SessionSocket, private readonly session: SpeechSession,
    private readonly up: WebSocket, private readonly onEnd: (code: number, reason: string) => void) {
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
    const voice = session.target.cloned ? session.target.upstreamVoice : o.voiceId;
    const up = await openUpstreamSocket(s.upstreams, session.target.model.upstream, {
      path: `/v1/text-to-speech/${encodeURIComponent(voice)}/stream-input?${q.toString()}`, clientHeaders: o.headers, requestId: socket.id,
      refusal: (res, id) => beta.upstreamError(res, id),
    });
    return new NativeStream(s, socket, session, up, onEnd);
  }

  /** A client frame: its characters held, then sent on without any key it carries. False when the hold was refused (the session ends). */
  async forward(m: Record<string, unknown>): Promise<boolean> {
    if (this.finished) return false;
    const text = typeof m.text === 'string' ? m.text : '';
    const characters = text.trim() === '' ? 0 : [...text].length;
    if (characters > 0) {
      const cost = price(this.session.target.model.prices, { inputTokens: 0, outputTokens: 0, characters, audioInMs: 0, audioOutMs: 0 });
      try {
        // The first text counts against the key's rpm as a request does.
        await this.session.charge.extend(cost, { countsAsRequest: this.seq === 0 && this.pending === 0, cover: true });
      } catch (e) {
        if (e instanceof GatewayError) { this.end(POLICY, `${e.code}: ${e.message}`); return false; }
        throw e;
      }
      this.pending += characters;
      this.pendingHeld = nd(this.pendingHeld + cost);
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
    if (typeof frame.audio === 'string' && frame.audio !== '' && this.pending > 0) {
      const characters = this.pending;
      const covers = this.pendingHeld;
      this.pending = 0;
      this.pendingHeld = nd(0n);
      await this.session.charge.settle(usage({ characters, basis: 'exact' }), { seq: ++this.seq, final: false, covers, extra: { upstream: 'elevenlabs' } });
    }
    await this.socket.send(data.toString('utf8'));
  }

  /** Ends the relay once: the upstream socket closes, the client hears `code`. */
  end(code: number, reason: string): void {
    if (this.finished) return;
    this.finished = true;
    if (this.up.readyState <= 1) this.up.close(1000);
    this.onEnd(code, reason);
  }

  /** Every upstream frame received has been delivered and billed. */
  idle(): Promise<void> { return this.chain; }
}

// A realtime response's reply spoken as it streams: each sentence, once complete, held (its characters), spoken by the speech upstream, and its PCM (resampled to 24 kHz where the upstream speaks at another rate) streamed as output_audio deltas, in order.
import { GatewayError } from '../../../errors.js';
import { usage } from '../../../exchange/usage.js';
import { presetVoice } from '../../../resolve/voices.js';
import { audioEncoder } from '../../../audio/index.js';
import { callFor } from './calls.js';
import type { SessionContext } from './context.js';
import { sentenceCut } from './sentences.js';
import { BYTES_PER_MS, POLICY, RATE, type Active, type Item } from './protocol.js';

/** What was spoken: characters the upstream accepted (billed), the audio delivered, what was held for it. */
export interface SpeechResult { characters: number; audioOutMs: number; held: bigint; failure: GatewayError | null }

/**
 * Speaks a reply sentence by sentence while its text streams. Each chunk holds its characters first
 * (402 ends the session like any billed unit), then asks the speech upstream for PCM; chunks are
 * spoken one after another, so the audio deltas are in order. Characters are billed once the
 * upstream accepted them (a 200), as the speech routes bill them; the audio delivered is recorded
 * (audio out, priced only where the session model sets an audio_out price), and each chunk's text
 * and audio length are kept for conversation.item.truncate.
 */
export class Speaker {
  private pending = '';
  private chain: Promise<void> = Promise.resolve();
  private stopped = false;
  private accepted = false;
  private chunks = 0;
  /** The chunk being spoken: its characters (accepted by the upstream) and the bytes of its audio so far. */
  private live = { characters: 0, bytes: 0 };
  readonly result: SpeechResult = { characters: 0, audioOutMs: 0, held: 0n, failure: null };

  constructor(private readonly ctx: SessionContext, private readonly a: Active, private readonly voice: { voice: string; speed: number },
    private readonly item: Item, private readonly outputIndex: () => number, private readonly seq: number,
    /** Writes the response's running record (throttled by the charge), before audio is sent. */
    private readonly record: () => Promise<void>) {}

  /** What has been spoken so far, the chunk under way included: the running record's characters and audio. */
  soFar(): { characters: number; audioOutMs: number } {
    return { characters: this.result.characters + this.live.characters, audioOutMs: this.result.audioOutMs + Math.floor(this.live.bytes / BYTES_PER_MS) };
  }

  /** A speech chunk failed (or its hold was refused): the response stops. */
  get failure(): GatewayError | null { return this.result.failure; }

  /** More of the reply's text: each sentence it completes is queued to be spoken. */
  push(text: string): void {
    if (this.stopped) return;
    this.pending += text;
    for (let cut = sentenceCut(this.pending); cut > 0; cut = sentenceCut(this.pending)) {
      this.queue(this.pending.slice(0, cut));
      this.pending = this.pending.slice(cut);
    }
  }

  /** The text is whole: the rest is spoken too. Resolves once all the audio is out. */
  async finish(): Promise<SpeechResult> {
    // Trailing whitespace is not speech: nothing to send or bill.
    if (!this.stopped && this.pending.trim().length > 0) this.queue(this.pending);
    this.pending = '';
    this.stopped = true;
    await this.chain;
    if (this.accepted && !this.a.dropped) {
      await this.ctx.emit({ type: 'response.output_audio.done', response_id: this.a.id, item_id: this.item.id, output_index: this.outputIndex(), content_index: 0 });
    }
    return this.result;
  }

  /** The reply ended short (cancelled, dropped, failed): nothing more is spoken; resolves once the chunk under way ends. */
  stop(): Promise<SpeechResult> {
    this.stopped = true;
    this.pending = '';
    return this.finish();
  }

  private queue(text: string): void {
    this.chain = this.chain.then(() => this.say(text));
  }

  private async say(text: string): Promise<void> {
    const { ctx, a, result } = this;
    if (a.cancelled || a.dropped || result.failure) return;
    const tts = ctx.audio.tts!;
    const characters = [...text].length;
    const held = ctx.charge.cost(usage({ characters, basis: 'exact' }));
    try {
      await ctx.charge.extend(held);
    } catch (e) {
      if (!(e instanceof GatewayError)) throw e;
      result.failure = e;
      this.stopped = true;
      await ctx.error(e.code, e.message, null, null, e.type);
      ctx.end(POLICY, e.code);
      return;
    }
    result.held += held;
    const req = { model: tts.upstreamModel, input: text, voice: presetVoice(this.voice.voice)?.upstreamVoice ?? this.voice.voice, response_format: 'pcm', speed: this.voice.speed };
    let bytes = 0;
    let accepted = false;
    let whole = false;
    try {
      const { call, res, failed } = await callFor(ctx, a, tts.upstream, '/v1/audio/speech', '*/*', Buffer.from(JSON.stringify(req)), `${ctx.socket.id}-${this.seq}-speech-${++this.chunks}`);
      if (failed) result.failure = failed;
      if (res) {
        accepted = true;
        // Accepted by the upstream: its characters are billed from now on, so the running record counts them.
        this.live = { characters, bytes: 0 };
        // The session's audio is 24 kHz PCM; an upstream whose pcm is at another rate (Piper's 22.05 kHz) is
        // resampled, not played fast. The resampler's tail (its last samples) comes out at the end of the reply.
        const pcm = audioEncoder('pcm', { inRate: ctx.s.upstreams.config(tts.upstream).speech.pcmRate, outRate: RATE });
        const send = async (c: Buffer): Promise<void> => {
          if (c.length === 0) return;
          bytes += c.length;
          this.live.bytes = bytes;
          await this.record();
          if (!a.dropped) await ctx.emit({ type: 'response.output_audio.delta', response_id: a.id, item_id: this.item.id, output_index: this.outputIndex(), content_index: 0, delta: c.toString('base64') });
        };
        for await (const chunk of res) {
          await send(pcm.push(chunk as Buffer));
          if (a.cancelled || a.dropped) { call.abort(); break; }
        }
        if (!a.cancelled && !a.dropped) await send(pcm.end());
        whole = res.complete && !a.cancelled && !a.dropped;
        if (!a.cancelled && !a.dropped && !res.complete) result.failure = new GatewayError({ status: 502, code: 'upstream_error', message: 'The speech upstream broke off mid-reply.' });
      }
    } catch (e) {
      if (!a.cancelled && !a.dropped) result.failure = e instanceof GatewayError ? e : new GatewayError({ status: 502, code: 'upstream_error', message: 'The speech upstream failed.' });
    }
    if (!accepted) return;
    this.accepted = true;
    // The chunk moves from `live` to the result at once: soFar() never counts it twice.
    this.live = { characters: 0, bytes: 0 };
    result.characters += characters;
    result.audioOutMs += Math.floor(bytes / BYTES_PER_MS);
    // What was spoken, for conversation.item.truncate.
    ctx.spoken.set(this.item.id, [...(ctx.spoken.get(this.item.id) ?? []), { text, ms: Math.floor(bytes / BYTES_PER_MS), cut: !whole }]);
  }
}

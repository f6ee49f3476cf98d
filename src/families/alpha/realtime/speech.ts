// A realtime response's reply spoken as it streams: each sentence, once complete, held on the response's Part (its characters), spoken by the speech upstream through relayPart, its PCM (resampled to 24 kHz where the upstream speaks at another rate) streamed as output_audio deltas, in order.
import type { PoolEntry } from '../../../config.js';
import { GatewayError } from '../../../errors.js';
import type { Meter } from '../../../exchange/meter.js';
import type { Part } from '../../../exchange/part.js';
import { usage, type Usage } from '../../../exchange/usage.js';
import { presetVoice } from '../../../resolve/voices.js';
import { audioEncoder, type AudioEncoder } from '../../../audio/index.js';
import { callFor } from './calls.js';
import type { SessionContext } from './context.js';
import { sentenceCut } from './sentences.js';
import { abortCalls, BYTES_PER_MS, RATE, type Active, type Item } from './protocol.js';

/** What was spoken: characters the upstream accepted (billed), the audio delivered, and why the speaking stopped short. */
export interface SpeechResult { characters: number; audioOutMs: number; failure: GatewayError | null }

/**
 * One sentence's speech reply: the upstream's PCM resampled to the session's 24 kHz, read by read, its
 * resampler's tail at the end (so no sentence loses its last samples). Its characters count from the
 * upstream's 200 on (billed once accepted, as the speech routes bill them).
 */
class SentenceMeter implements Meter {
  readonly mode = 'stream';
  accepted = false;
  done = false;
  /** Audio bytes made so far (the running records' audio out). */
  bytes = 0;
  private readonly pcm: AudioEncoder;

  constructor(rate: number, readonly characters: number) { this.pcm = audioEncoder('pcm', { inRate: rate, outRate: RATE }); }

  onResponse(): { contentType: string } { this.accepted = true; return { contentType: 'audio/pcm' }; }
  onData(chunk: Buffer): Buffer { return this.count(this.pcm.push(chunk)); }
  onEnd(complete: boolean): Buffer { this.done = complete; return this.count(this.pcm.end()); }
  get produced(): boolean { return this.accepted; }
  usage(): Usage { return usage({ characters: this.accepted ? this.characters : 0, audioOutMs: Math.floor(this.bytes / BYTES_PER_MS), basis: this.done ? 'exact' : 'partial' }); }

  private count(b: Buffer): Buffer { this.bytes += b.length; return b; }
}

/**
 * Speaks a reply sentence by sentence while its text streams. Each sentence is held on the response's
 * part first (its characters: a refusal ends the session like any billed unit), then relayed from the
 * speech upstream; sentences are spoken one after another, so the audio deltas are in order. The
 * audio delivered is billed as audio out (priced only where the session model sets an audio_out
 * price), and each sentence's text and audio length are kept for conversation.item.truncate.
 */
export class Speaker {
  private pending = '';
  private chain: Promise<void> = Promise.resolve();
  private stopped = false;
  private accepted = false;
  private chunks = 0;
  /** The sentence being spoken. */
  private live: SentenceMeter | null = null;
  readonly result: SpeechResult = { characters: 0, audioOutMs: 0, failure: null };

  constructor(private readonly ctx: SessionContext, private readonly a: Active, private readonly voice: { voice: string; speed: number },
    private readonly item: Item, private readonly outputIndex: () => number, private readonly part: Part,
    /** What the whole response would bill now: its running records' usage. */
    private readonly responseSoFar: () => Usage) {}

  /** What has been spoken so far, the sentence under way included: the running record's characters and audio. */
  soFar(): { characters: number; audioOutMs: number } {
    const l = this.live?.usage();
    return { characters: this.result.characters + (l?.characters ?? 0), audioOutMs: this.result.audioOutMs + (l?.audioOutMs ?? 0) };
  }

  /** A sentence failed (or its hold was refused): the response stops. */
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

  /** The reply ended short (cancelled, dropped, failed): nothing more is spoken; resolves once the sentence under way ends. */
  stop(): Promise<SpeechResult> {
    this.stopped = true;
    this.pending = '';
    return this.finish();
  }

  private queue(text: string): void {
    this.chain = this.chain.then(() => this.say(text));
  }

  /** The response stops: this sentence failed, or its hold was refused. */
  private fail(e: GatewayError): void {
    this.result.failure = e;
    this.stopped = true;
    abortCalls(this.a);
  }

  private async say(text: string): Promise<void> {
    const { ctx, a, result } = this;
    if (a.stop.signal.aborted || result.failure) return;
    const tts = ctx.audio.tts!;
    const characters = [...text].length;
    try {
      await this.part.hold(usage({ characters, basis: 'exact' }));
    } catch (e) {
      if (!(e instanceof GatewayError)) throw e;
      this.fail(e);
      await ctx.refused(e);
      return;
    }
    const meter = new SentenceMeter(ctx.s.upstreams.config(tts.upstream).speech.pcmRate, characters);
    this.live = meter;
    let sent = 0;
    const voice = presetVoice(this.voice.voice)?.upstreamVoice ?? this.voice.voice;
    const body = (e: PoolEntry) => Buffer.from(JSON.stringify({ model: e.upstreamModel, input: text, voice, response_format: 'pcm', speed: this.voice.speed }));
    const o = await callFor(ctx, a, { part: this.part, model: tts, path: '/v1/audio/speech', accept: '*/*', body, meter, usage: this.responseSoFar,
      requestId: `${ctx.socket.id}-${this.part.seq}-speech-${++this.chunks}`,
      send: async (out) => {
        sent += out.length;
        if (!a.dropped) await ctx.emit({ type: 'response.output_audio.delta', response_id: a.id, item_id: this.item.id, output_index: this.outputIndex(), content_index: 0, delta: Buffer.from(out).toString('base64') });
      } });
    // The sentence moves from `live` to the result at once: soFar() never counts it twice.
    this.live = null;
    if (o.failure && !a.cancelled && !a.dropped) this.fail(o.failure);
    if (!meter.accepted) return;
    this.accepted = true;
    result.characters += characters;
    result.audioOutMs += Math.floor(sent / BYTES_PER_MS);
    // What was spoken, for conversation.item.truncate.
    ctx.spoken.set(this.item.id, [...(ctx.spoken.get(this.item.id) ?? []), { text, ms: Math.floor(sent / BYTES_PER_MS), cut: !o.complete }]);
  }
}

// A realtime session's audio in: appended PCM, server VAD cutting it into turns, manual commits and clears; each turn becomes a user item, transcribed, then answered if asked.
import { Vad } from '../../../audio/vad.js';
import { int16 } from '../../../audio/pcm.js';
import type { SessionContext } from './context.js';
import { InputAudio } from './input-audio.js';
import { transcribe } from './transcribe.js';
import { abortCalls, BYTES_PER_MS, RATE, rid, RtError, type Item, type Obj } from './protocol.js';

/** The most input audio a session buffers uncommitted (10 minutes). */
const MAX_INPUT_MS = 10 * 60_000;
/** The least audio a commit takes (as the OpenAI protocol has it). */
const MIN_COMMIT_MS = 100;

export class AudioTurns {
  private readonly input = new InputAudio();
  /** Server VAD over the input (null when turn_detection is null), and where its sample count starts. */
  private vad: Vad | null = null;
  private vadOrigin = 0;
  /** The turn VAD heard start: its item id and first sample (prefix padding included). */
  private turn: { itemId: string; start: number } | null = null;

  constructor(private readonly ctx: SessionContext) { this.reset(); }

  get turnDetection(): Obj | null {
    return ((this.ctx.session.audio as { input: Obj }).input.turn_detection as Obj | null) ?? null;
  }

  /** A fresh detector from the session's turn_detection, counting from the buffer's end; no turn open. */
  reset(): void {
    const td = this.turnDetection;
    this.turn = null;
    this.vadOrigin = this.input.end;
    this.vad = td ? new Vad({ threshold: Number(td.threshold ?? 0.5), prefixPaddingMs: Number(td.prefix_padding_ms ?? 300), silenceDurationMs: Number(td.silence_duration_ms ?? 500) }, RATE) : null;
  }

  private ms(sample: number): number { return Math.round((sample * 1000) / RATE); }

  /** input_audio_buffer.append: base64 PCM16 at 24 kHz; server VAD (when on) starts and ends turns as it hears them. */
  async append(m: Obj): Promise<void> {
    if (!this.ctx.audio.stt) throw new RtError('unsupported_event', 'type', 'Audio input needs a transcription (stt) model, and this gateway has none configured; send text with conversation.item.create.');
    if (typeof m.audio !== 'string') throw new RtError('invalid_value', 'audio', '`audio` must be base64-encoded 16-bit PCM at 24 kHz.');
    const bytes = Buffer.from(m.audio, 'base64');
    if (bytes.length % 2 !== 0) throw new RtError('invalid_value', 'audio', '`audio` must be whole 16-bit samples (an even number of bytes).');
    if ((this.input.end - this.input.base) / (RATE / 1000) + bytes.length / BYTES_PER_MS > MAX_INPUT_MS) {
      throw new RtError('input_audio_buffer_too_large', 'audio', `The input audio buffer holds at most ${MAX_INPUT_MS / 60_000} minutes; commit or clear it.`);
    }
    this.input.append(bytes);
    if (!this.vad) return;
    const td = this.turnDetection!;
    for (const ev of this.vad.push(int16(bytes))) {
      const at = this.vadOrigin + ev.at;
      if (ev.type === 'start') {
        const start = Math.max(this.input.base, at - Math.round((Number(td.prefix_padding_ms ?? 300) * RATE) / 1000));
        this.turn = { itemId: rid('item'), start };
        await this.ctx.emit({ type: 'input_audio_buffer.speech_started', audio_start_ms: this.ms(start), item_id: this.turn.itemId });
        // The user talks over a reply: it stops (billed for what it produced).
        if (td.interrupt_response !== false && this.ctx.active) {
          this.ctx.active.cancelled = true;
          this.ctx.active.cancelReason = 'turn_detected';
          abortCalls(this.ctx.active);
        }
      } else if (this.turn) {
        const turn = this.turn;
        this.turn = null;
        await this.ctx.emit({ type: 'input_audio_buffer.speech_stopped', audio_end_ms: this.ms(at), item_id: turn.itemId });
        await this.commitTurn(turn.start, at, turn.itemId, td.create_response !== false);
      }
    }
    // Between turns only the prefix padding is kept.
    if (!this.turn) this.input.dropBefore(this.input.end - Math.round((Number(td.prefix_padding_ms ?? 300) * RATE) / 1000));
  }

  /** input_audio_buffer.commit: the whole buffer becomes a user turn (no response unless VAD would make one). */
  async commit(): Promise<void> {
    if (!this.ctx.audio.stt) throw new RtError('unsupported_event', 'type', 'Audio input needs a transcription (stt) model, and this gateway has none configured.');
    const itemId = this.turn?.itemId ?? rid('item');
    const end = this.input.end;
    const ms = this.ms(end - this.input.base);
    if (ms < MIN_COMMIT_MS) {
      throw new RtError('input_audio_buffer_commit_empty', null, `Error committing input audio buffer: buffer too small. Expected at least ${MIN_COMMIT_MS}ms of audio, but buffer only has ${ms}ms of audio.`);
    }
    await this.commitTurn(this.input.base, end, itemId, false);
    this.reset();
  }

  async clear(): Promise<void> {
    this.input.clear();
    this.reset();
    await this.ctx.emit({ type: 'input_audio_buffer.cleared' });
  }

  /**
   * The audio [from, to) becomes a user message item (its transcript to come); the buffer keeps what
   * follows. The transcription runs in turn with responses, billed as its own part; then, if asked,
   * a response to it.
   */
  private async commitTurn(from: number, to: number, itemId: string, respond: boolean): Promise<void> {
    const pcm = Buffer.from(this.input.slice(from, to));
    this.input.dropBefore(to);
    const previous = this.ctx.items.length > 0 ? this.ctx.items[this.ctx.items.length - 1]!.id : null;
    const item: Item = { id: itemId, object: 'realtime.item', type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_audio', transcript: null }] };
    this.ctx.items.push(item);
    await this.ctx.emit({ type: 'input_audio_buffer.committed', previous_item_id: previous, item_id: itemId });
    await this.ctx.emit({ type: 'conversation.item.added', previous_item_id: previous, item });
    void this.ctx.queue('transcription', async () => {
      const heard = await transcribe(this.ctx, item, pcm);
      if (!heard || this.ctx.ended) return;
      await this.ctx.emit({ type: 'conversation.item.done', previous_item_id: previous, item });
      // A response the client already asked for covers this turn.
      if (!respond || this.ctx.active) return;
      try {
        this.ctx.startResponse({});
      } catch (e) {
        if (!(e instanceof RtError)) throw e;
        await this.ctx.error(e.code, e.message, e.param, null, e.type);
      }
    });
  }
}

// What a pass-through session estimates of its upstream's conversation: the prompt the next response reads, the audio formats and output limit the upstream last reported, and a response's worst case.
import type { ModelConfig } from '../../../config.js';
import type { ChargeSpec } from '../../../exchange/charge.js';
import { usage, type Usage } from '../../../exchange/usage.js';
import { PromptEstimate, bytesPerMs } from '../../../meter/realtime-usage.js';
import type { Obj } from './passthrough-events.js';

/**
 * The upstream owns the conversation and reports usage only in `response.done`: this keeps the
 * estimate a response's hold, and a response that never reports, are billed from. The prompt is the
 * last reported input plus output, plus what the client added since (text, and audio by its length).
 */
export class ConversationEstimate {
  readonly prompt = new PromptEstimate();
  private inBytesPerMs = 48;
  private outMs = 48;
  /** The session's max_output_tokens as the upstream last reported it. */
  private sessionMaxOut: unknown = 'inf';

  constructor(private readonly model: Pick<ModelConfig, 'maxOutputTokens'>, private readonly prices: ChargeSpec['model']['prices']) {}

  /** Bytes a millisecond of the upstream's output audio (its output format). */
  get outBytesPerMs(): number { return this.outMs; }

  /** A client event passed on: what it adds to the conversation. */
  client(m: Obj): void {
    switch (m.type) {
      case 'session.update': case 'transcription_session.update': {
        const instructions = (m.session as Obj).instructions;
        if (typeof instructions === 'string') this.prompt.addText(instructions);
        return;
      }
      case 'conversation.item.create': this.item(m.item); return;
      case 'input_audio_buffer.append': if (typeof m.audio === 'string') this.audio(m.audio); return;
      default:
    }
  }

  /** The upstream's session (session.created, session.updated): its audio formats and output limit. */
  session(session: Obj): void {
    const audio = (session.audio ?? {}) as { input?: Obj; output?: Obj };
    this.inBytesPerMs = bytesPerMs(audio.input?.format ?? session.input_audio_format);
    this.outMs = bytesPerMs(audio.output?.format ?? session.output_audio_format);
    this.sessionMaxOut = session.max_output_tokens ?? session.max_response_output_tokens ?? 'inf';
  }

  /** A response's worst case: the conversation's estimated prompt, plus its most output at the dearer of the text and audio output prices. */
  worstCase(r: Obj): Usage {
    const limit = r.max_output_tokens ?? r.max_response_output_tokens ?? this.sessionMaxOut;
    const maxOut = typeof limit === 'number' && limit >= 1 ? Math.min(Math.floor(limit), this.model.maxOutputTokens) : this.model.maxOutputTokens;
    const audioDearer = (this.prices.audioOutputPerMTok ?? 0n) > this.prices.outputPerMTok;
    let extraText = 0;
    if (typeof r.instructions === 'string') extraText += r.instructions.length;
    if (Array.isArray(r.input)) extraText += JSON.stringify(r.input).length;
    return usage({
      inputTokens: this.prompt.text + extraText, audioInputTokens: this.prompt.audio,
      ...(audioDearer ? { audioOutputTokens: maxOut } : { outputTokens: maxOut }), basis: 'estimated',
    });
  }

  /** What a client item adds to the conversation. */
  private item(item: unknown): void {
    const content = (item as Obj | null)?.content;
    if (Array.isArray(content)) {
      for (const c of content as Obj[]) {
        if (typeof c?.text === 'string') this.prompt.addText(c.text);
        if (typeof c?.audio === 'string') this.audio(c.audio);
      }
    }
    for (const k of ['arguments', 'output'] as const) {
      const v = (item as Obj | null)?.[k];
      if (typeof v === 'string') this.prompt.addText(v);
    }
  }

  /** Base64 audio: 3 bytes for every 4 characters, at the input format's bytes a millisecond. */
  private audio(b64: string): void {
    this.prompt.addAudio(Math.floor((b64.length * 3) / 4) / this.inBytesPerMs);
  }
}

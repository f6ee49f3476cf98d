// A realtime upstream's usage: its response.done `usage` as billable units, and Tollgate's estimate of a response cut before one came.
import { usage, type Usage } from '../exchange/usage.js';
import { countTokens } from './tokens.js';

type Obj = Record<string, unknown>;

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);

/**
 * A `response.done` usage block (`RealtimeResponse.usage`: input_tokens, output_tokens and their
 * `input_token_details` {cached_tokens, text_tokens, audio_tokens, image_tokens, cached_tokens_details
 * {text_tokens, audio_tokens, image_tokens}} and `output_token_details` {text_tokens, audio_tokens}) as
 * disjoint units: cached input tokens (every modality), audio input not cached, the other input
 * (text and image) not cached; audio output, the other output. The totals are the upstream's:
 * a detail larger than its total is cut to it. Null when there is no usage block.
 */
export function realtimeUsage(raw: unknown): Usage | null {
  if (!raw || typeof raw !== 'object') return null;
  const u = raw as Obj;
  const inD = (u.input_token_details ?? {}) as Obj;
  const outD = (u.output_token_details ?? {}) as Obj;
  const cachedD = (inD.cached_tokens_details ?? {}) as Obj;
  const input = u.input_tokens !== undefined ? num(u.input_tokens) : num(inD.text_tokens) + num(inD.audio_tokens) + num(inD.image_tokens);
  const output = u.output_tokens !== undefined ? num(u.output_tokens) : num(outD.text_tokens) + num(outD.audio_tokens);
  const cached = Math.min(input, num(inD.cached_tokens));
  const audioIn = Math.min(input - cached, Math.max(0, num(inD.audio_tokens) - num(cachedD.audio_tokens)));
  const audioOut = Math.min(output, num(outD.audio_tokens));
  return usage({
    inputTokens: input - cached - audioIn, cachedInputTokens: cached, audioInputTokens: audioIn,
    outputTokens: output - audioOut, audioOutputTokens: audioOut, basis: 'exact',
  });
}

/**
 * Tollgate's own count for a response that ended without a `response.done` (the upstream went away,
 * or did not answer a cancel): the prompt as estimated, plus the output seen in its deltas. Audio
 * is counted at fixed rates, an estimate: input audio 10 tokens a second, output audio 20.
 */
export const AUDIO_IN_TOKENS_PER_SECOND = 10;
export const AUDIO_OUT_TOKENS_PER_SECOND = 20;

/** Bytes per millisecond of a realtime audio format (PCM16 at 24 kHz; G.711 at 8 kHz). */
export function bytesPerMs(format: unknown): number {
  const type = typeof format === 'string' ? format : (format as Obj | null | undefined)?.type;
  return type === 'audio/pcmu' || type === 'audio/pcma' || type === 'g711_ulaw' || type === 'g711_alaw' ? 8 : 48;
}

/** What a session's conversation holds, as the prompt of its next response (an estimate; the upstream owns the conversation). */
export class PromptEstimate {
  /** The last response's reported input plus output: the conversation up to its end. */
  private base = 0;
  private textTokens = 0;
  private audioMs = 0;

  /** Text the client added (an item, instructions). */
  addText(text: string): void { this.textTokens += countTokens(text); }
  /** Input audio the client appended. */
  addAudio(ms: number): void { this.audioMs += ms; }
  /** A response.done's usage: the conversation now holds its prompt and its output. */
  reported(u: Usage): void {
    this.base = u.inputTokens + u.cachedInputTokens + u.audioInputTokens + u.outputTokens + u.audioOutputTokens;
    this.textTokens = 0;
    this.audioMs = 0;
  }

  get text(): number { return this.base + this.textTokens; }
  get audio(): number { return Math.ceil((this.audioMs * AUDIO_IN_TOKENS_PER_SECOND) / 1000); }
}

/** The output of one response as its deltas showed it. */
export class OutputCount {
  private text = 0;
  private audioBytes = 0;
  produced = false;

  /** Counts one server event of the response (text, transcript, arguments, audio deltas). */
  add(ev: Obj, outBytesPerMs: number): void {
    const d = ev.delta;
    if (typeof d !== 'string' || d.length === 0) return;
    switch (ev.type) {
      case 'response.output_text.delta': case 'response.text.delta':
      case 'response.function_call_arguments.delta':
        this.text += countTokens(d);
        this.produced = true;
        return;
      case 'response.output_audio.delta': case 'response.audio.delta':
        // base64: 3 bytes for every 4 characters.
        this.audioBytes += Math.floor((d.length * 3) / 4);
        this.bytesPerMs = outBytesPerMs;
        this.produced = true;
        return;
      default:
        // A spoken reply's transcript is the audio's text: the audio is what is billed.
        return;
    }
  }

  private bytesPerMs = 48;

  /** The response's estimated usage (`partial`): the prompt estimate plus this output. */
  usage(prompt: PromptEstimate): Usage {
    const audioMs = this.audioBytes / this.bytesPerMs;
    return usage({
      inputTokens: prompt.text, audioInputTokens: prompt.audio, outputTokens: this.text,
      audioOutputTokens: Math.ceil((audioMs * AUDIO_OUT_TOKENS_PER_SECOND) / 1000), basis: 'partial',
    });
  }
}

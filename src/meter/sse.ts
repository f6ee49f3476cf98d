// Meters an OpenAI-style SSE stream on its way through: usage, produced tokens, and the usage the client did not ask for.

export interface StreamUsage { input: number; output: number; reasoning: number }

/** What the relay reads from a stream meter, whatever the stream's format. */
export interface StreamMeter {
  usage: StreamUsage | null;
  /** The upstream's final usage arrived. */
  final: boolean;
  /** The stream reached its end marker. */
  done: boolean;
  push(chunk: Buffer | string): string;
  producedTokens(): number;
}

export interface SseMeterOptions {
  /** Drop the trailing `choices: []` usage chunk (the gateway asked for it, the client did not). */
  stripUsageChunk: boolean;
  /** Remove `usage` from ordinary chunks (continuous usage stats the client did not ask for). */
  stripChunkUsage: boolean;
  /** Re-shapes each parsed chunk (and the end of stream) into other events: Responses translation. */
  translate?: { chunk(obj: Record<string, unknown>): string; done(): string };
}

const DATA = 'data:';

export class SseMeter implements StreamMeter {
  /** The last usage the upstream reported (final chunk, or running continuous stats). */
  usage: StreamUsage | null = null;
  final = false;
  done = false;
  malformed = false;
  /** Chunks that carried generated text/arguments, per choice: the fallback count of produced tokens. */
  private readonly produced = new Map<number, number>();
  private pending = '';

  constructor(private readonly opts: SseMeterOptions) {}

  /** Feeds upstream bytes; returns the text to forward to the client (whole events only). */
  push(chunk: Buffer | string): string {
    this.pending += typeof chunk === 'string' ? chunk : chunk.toString('utf8');
    let out = '';
    let start = 0;
    for (;;) {
      const end = this.pending.indexOf('\n\n', start);
      if (end < 0) break;
      out += this.event(this.pending.slice(start, end + 2));
      start = end + 2;
    }
    this.pending = this.pending.slice(start);
    return out;
  }

  /** Tokens produced so far: reported running usage if any, else the counted deltas. */
  producedTokens(): number {
    let counted = 0;
    for (const v of this.produced.values()) counted += v;
    return Math.max(counted, this.usage?.output ?? 0);
  }

  private event(raw: string): string {
    const line = raw.startsWith(DATA) ? raw : raw.replace(/\r\n/g, '\n');
    if (!line.startsWith(DATA)) return raw; // comments, event: lines, keep-alives pass through
    const payload = line.slice(DATA.length).trim();
    if (payload === '[DONE]') { this.done = true; return this.opts.translate ? this.opts.translate.done() : raw; }
    let obj: Record<string, unknown>;
    try { obj = JSON.parse(payload) as Record<string, unknown>; } catch { this.malformed = true; return raw; }
    const usage = readUsage(obj.usage);
    if (usage) this.usage = usage;
    const choices = obj.choices as Record<string, unknown>[] | undefined;
    const translated = this.opts.translate?.chunk(obj);
    if (Array.isArray(choices) && choices.length === 0 && usage) {
      this.final = true;
      return translated ?? (this.opts.stripUsageChunk ? '' : raw);
    }
    if (Array.isArray(choices)) {
      for (const c of choices) {
        const d = (c.delta ?? c) as Record<string, unknown>;
        const toolCalls = d.tool_calls as { function?: { arguments?: string } }[] | undefined;
        const hasText = (typeof d.content === 'string' && d.content.length > 0) || (typeof d.text === 'string' && d.text.length > 0)
          || (typeof d.reasoning_content === 'string' && d.reasoning_content.length > 0)
          || (Array.isArray(toolCalls) && toolCalls.some((t) => (t.function?.arguments ?? '').length > 0));
        if (hasText) { const i = num(c.index); this.produced.set(i, (this.produced.get(i) ?? 0) + 1); }
      }
    }
    if (translated !== undefined) return translated;
    if (usage && this.opts.stripChunkUsage) {
      obj.usage = null;
      return `data: ${JSON.stringify(obj)}\n\n`;
    }
    return raw;
  }
}

/**
 * A usage block as the hosts report it, in either API's names: chat (`prompt_tokens`,
 * `completion_tokens`, `completion_tokens_details`) or Responses (`input_tokens`, `output_tokens`,
 * `output_tokens_details`). Null when there is none.
 */
export function readUsage(u: unknown): StreamUsage | null {
  if (!u || typeof u !== 'object') return null;
  const r = u as Record<string, unknown>;
  const d = (r.completion_tokens_details ?? r.output_tokens_details) as Record<string, unknown> | undefined;
  return { input: num(r.prompt_tokens ?? r.input_tokens), output: num(r.completion_tokens ?? r.output_tokens), reasoning: num(d?.reasoning_tokens) };
}

/** A reported token count: a finite positive number, floored; anything else counts as 0. */
export function num(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0;
}

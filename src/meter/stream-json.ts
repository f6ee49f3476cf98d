// Meters a buffered chat or completions request that Tollgate sent as a stream (an upstream whose buffered usage
// counts one task only, llama.cpp): every task's usage summed, and the buffered reply built from the chunks.
import type { Meter } from '../exchange/meter.js';
import { usage, type Usage } from '../exchange/usage.js';
import { upstreamMalformed } from '../proxy/upstream.js';
import { readUsage, SseEvents, type StreamUsage } from './sse.js';

type Obj = Record<string, unknown>;

export interface StreamJsonOptions {
  /** Tollgate's model id, which the reply names. */
  model: string;
  /** Prompt tokens counted by Tollgate, for a stream without usage. */
  promptTokens(): number;
  /** Output tokens counted from the built reply, for a stream without usage. */
  outputTokens(json: Obj): number;
}

interface ToolCall { id?: unknown; type?: unknown; function: { name?: unknown; arguments: string } }
interface Choice {
  index: number; role: string; content: string | null; reasoning: string; text: string;
  tools: Map<number, ToolCall>; logprobs: Obj | null; finish: unknown;
}

/** Appends a chunk's logprobs to what a choice has: every array (chat's `content`, completions' `tokens`…) joined. */
function joinLogprobs(into: Obj | null, lp: unknown): Obj | null {
  if (!lp || typeof lp !== 'object' || Array.isArray(lp)) return into;
  const out: Obj = into ?? {};
  for (const [k, v] of Object.entries(lp as Obj)) {
    if (Array.isArray(v)) out[k] = [...((out[k] as unknown[] | undefined) ?? []), ...v];
    else if (out[k] === undefined) out[k] = v;
  }
  return out;
}

/**
 * One chat completion (or text completion) as the upstream would have answered it whole, from its stream:
 * each choice's text, reasoning, tool calls and logprobs joined in order, and the usage of every task summed
 * (llama.cpp reports each task's on its own; an OpenAI-shaped host sends one report for all).
 */
export class StreamJsonMeter implements Meter {
  readonly mode = 'buffered';
  done = false;
  private readonly events = new SseEvents();
  private readonly choices = new Map<number, Choice>();
  private head: Obj = {};
  private chat = true;
  private reported: StreamUsage | null = null;
  private result: Usage | null = null;

  constructor(private readonly opts: StreamJsonOptions) {}

  onResponse(): { contentType: string } { return { contentType: 'application/json' }; }

  onData(chunk: Buffer): string {
    for (const raw of this.events.push(chunk)) this.event(raw);
    return '';
  }

  onEnd(complete: boolean): string {
    if (!complete || !this.done) throw upstreamMalformed();
    const reply = this.reply();
    const u = this.reported;
    this.result = u
      ? usage({ inputTokens: u.input, outputTokens: u.output, reasoningTokens: u.reasoning, basis: 'exact' })
      : usage({ inputTokens: this.opts.promptTokens(), outputTokens: this.opts.outputTokens(reply), basis: 'estimated' });
    if (u) reply.usage = { prompt_tokens: u.input, completion_tokens: u.output, total_tokens: u.input + u.output };
    return JSON.stringify(reply);
  }

  get produced(): boolean { return this.done; }

  usage(): Usage { return this.result ?? usage({ basis: 'partial' }); }

  private event(raw: string): void {
    const data = raw.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
    if (data === '') return;
    if (data === '[DONE]') { this.done = true; return; }
    let obj: Obj | null;
    try { obj = JSON.parse(data) as Obj | null; } catch { throw upstreamMalformed(); }
    // llama.cpp opens a stream of several prompts with `data: null`: nothing in it.
    if (obj === null) return;
    if (typeof obj !== 'object' || Array.isArray(obj) || obj.error !== undefined) throw upstreamMalformed();
    if (this.choices.size === 0 && obj.id !== undefined) {
      this.chat = obj.object !== 'text_completion';
      this.head = { id: obj.id, object: this.chat ? 'chat.completion' : 'text_completion', created: obj.created, model: this.opts.model,
        ...(obj.system_fingerprint !== undefined ? { system_fingerprint: obj.system_fingerprint } : {}) };
    }
    const u = readUsage(obj.usage);
    if (u) {
      const r = this.reported;
      this.reported = r ? { input: r.input + u.input, output: r.output + u.output, reasoning: r.reasoning + u.reasoning } : u;
    }
    for (const c of Array.isArray(obj.choices) ? (obj.choices as Obj[]) : []) this.choice(c);
  }

  private choice(c: Obj): void {
    const index = typeof c.index === 'number' ? c.index : 0;
    let ch = this.choices.get(index);
    if (!ch) {
      ch = { index, role: 'assistant', content: null, reasoning: '', text: '', tools: new Map(), logprobs: null, finish: null };
      this.choices.set(index, ch);
    }
    if (c.finish_reason !== null && c.finish_reason !== undefined) ch.finish = c.finish_reason;
    ch.logprobs = joinLogprobs(ch.logprobs, c.logprobs);
    if (typeof c.text === 'string') ch.text += c.text;
    const d = (c.delta ?? {}) as Obj;
    if (typeof d.role === 'string') ch.role = d.role;
    if (typeof d.content === 'string') ch.content = (ch.content ?? '') + d.content;
    if (typeof d.reasoning_content === 'string') ch.reasoning += d.reasoning_content;
    for (const t of Array.isArray(d.tool_calls) ? (d.tool_calls as Obj[]) : []) {
      const i = typeof t.index === 'number' ? t.index : ch.tools.size;
      const call = ch.tools.get(i) ?? { function: { arguments: '' } };
      if (t.id !== undefined) call.id = t.id;
      if (t.type !== undefined) call.type = t.type;
      const f = (t.function ?? {}) as Obj;
      if (typeof f.name === 'string') call.function.name = f.name;
      if (typeof f.arguments === 'string') call.function.arguments += f.arguments;
      ch.tools.set(i, call);
    }
  }

  private reply(): Obj {
    const choices = [...this.choices.values()].sort((a, b) => a.index - b.index).map((ch): Obj => {
      if (!this.chat) return { text: ch.text, index: ch.index, logprobs: ch.logprobs, finish_reason: ch.finish };
      const message: Obj = { role: ch.role, content: ch.content };
      if (ch.reasoning !== '') message.reasoning_content = ch.reasoning;
      if (ch.tools.size > 0) message.tool_calls = [...ch.tools.entries()].sort((a, b) => a[0] - b[0]).map(([, t]) => ({ id: t.id, type: t.type ?? 'function', function: t.function }));
      return { index: ch.index, message, ...(ch.logprobs ? { logprobs: ch.logprobs } : {}), finish_reason: ch.finish };
    });
    return { ...this.head, model: this.opts.model, choices };
  }
}

// Meters an OpenAI-style SSE stream on its way through: usage, produced tokens, and the usage the client did not ask for.
import { StringDecoder } from 'node:string_decoder';
import type { Meter } from '../exchange/meter.js';
import { usage, type Usage } from '../exchange/usage.js';
import { nameModel } from './model-name.js';
import { COST_MARK, putCost } from './cost-mark.js';

export interface StreamUsage { input: number; output: number; reasoning: number }

export const SSE_TYPE = 'text/event-stream; charset=utf-8';

export interface SseMeterOptions {
  /** Drop the trailing `choices: []` usage chunk (the gateway asked for it, the client did not). */
  stripUsageChunk: boolean;
  /** Remove `usage` from ordinary chunks (continuous usage stats the client did not ask for). */
  stripChunkUsage: boolean;
  /**
   * The upstream reports running usage on its chunks (vLLM's continuous stats): the newest report
   * replaces the last, and only the `choices: []` chunk is final. Otherwise every report is one task's
   * whole usage and the stream's usage is their sum: an OpenAI-shaped host sends one; llama.cpp sends
   * one per choice (n > 1) or per prompt, on the completions finish chunk or a chunk of its own.
   */
  runningUsage?: boolean;
  /** Re-shapes each parsed chunk (and the start and end of the stream) into other events: Responses translation. */
  translate?: { start(): string; chunk(obj: Record<string, unknown>): string; done(cost?: bigint): string };
  /**
   * What a usage costs (the exchange's prices): given, the final usage chunk the client asked for carries
   * `usage.cost` (and a translated stream's last event its own), exactly what the exchange is debited.
   */
  cost?: (u: Usage) => bigint;
  /** Prompt tokens when the upstream reports none (a stream cut before its usage): counted by Tollgate. */
  promptTokens?: () => number;
  /** The model id replies name (Tollgate's, not the upstream's): each chunk's `model` is set to it, its other bytes kept. */
  model?: string;
  /**
   * llama.cpp's `prompt_progress` chunks (asked for with `return_progress`): their `total` is a task's prompt
   * token count, known before any output. `strip`: Tollgate asked, the chunks are dropped; `keep`: the client asked.
   */
  promptProgress?: 'strip' | 'keep';
}

/**
 * What a token stream's usage is, from what its meter saw: the upstream's final usage when it
 * came (exact); else the reported or counted prompt plus the output produced (estimated when the
 * stream ended normally, partial when it was cut).
 */
export function streamUsage(reported: StreamUsage | null, final: boolean, done: boolean, produced: number, promptTokens: () => number): Usage {
  if (final && reported) return usage({ inputTokens: reported.input, outputTokens: reported.output, reasoningTokens: reported.reasoning, basis: 'exact' });
  return usage({
    inputTokens: reported?.input || promptTokens(), outputTokens: Math.max(produced, reported?.output ?? 0),
    reasoningTokens: reported?.reasoning ?? 0, basis: done ? 'estimated' : 'partial',
  });
}

const DATA = 'data:';
const LF = 0x0a;

/**
 * Relays an OpenAI-style chat/completions event stream and meters it. Most events are a token's
 * chunk with one choice and no usage: those are read by a scan of their bytes, without decoding them or
 * JSON.parse (at 3,000 open streams, parsing every chunk was 6% of the gateway's busy CPU, and garbage
 * for the GC). An event with usage, several choices, or anything unusual is decoded and parsed whole.
 * Events are split on blank lines (LF or CRLF), and a part of an event is kept as bytes until the rest
 * comes, so a character split between two TCP reads is decoded whole; a chunk that is whole events,
 * unchanged, is forwarded as the same bytes. An event whose `model` is not the id Tollgate answers with
 * (`opts.model`) has that one value replaced, as bytes: the renamed chunk goes out as a Buffer spliced
 * from the upstream's, with no string made of it on the way (docs/benchmarks.md, "The stream meter on
 * bytes"). A stream that is translated (Responses, realtime) is decoded as text, event by event.
 */
export class SseMeter implements Meter {
  readonly mode = 'stream';
  /** The last usage the upstream reported (final chunk, or running continuous stats). */
  reported: StreamUsage | null = null;
  /** The upstream's final usage arrived. */
  final = false;
  /** Usage reports seen (each one task's whole usage, unless the upstream reports running usage). */
  private reports = 0;
  /** Each task's prompt tokens from its `prompt_progress` report, by choice index. */
  private readonly progress = new Map<number, number>();
  /** The stream reached `[DONE]`. */
  done = false;
  /** Chunks that carried generated text/arguments, per choice: the fallback count of produced tokens. */
  private deltas = 0;
  private started = false;
  /** A translated stream's events, as text. */
  private readonly events = new SseEvents();
  /** The bytes of an event not yet whole (a copy, so no read's buffer is kept alive with it). */
  private pending: Buffer | null = null;
  /** `opts.model` as JSON text, or null when chunks keep the upstream's name. */
  private readonly ours: string | null;
  /** The same as UTF-8 bytes, spliced into a chunk in place of the upstream's name. */
  private readonly oursBytes: Buffer | null;

  constructor(private readonly opts: SseMeterOptions) {
    this.ours = opts.model === undefined ? null : JSON.stringify(opts.model);
    this.oursBytes = this.ours === null ? null : Buffer.from(this.ours);
  }

  onResponse(): { contentType: string } {
    return { contentType: SSE_TYPE };
  }

  onData(chunk: Buffer): Buffer | string {
    if (this.opts.translate) return this.translated(chunk);
    const fresh = this.pending === null;
    const b = fresh ? chunk : Buffer.concat([this.pending!, chunk]);
    this.pending = null;
    // What goes out, once an event differs: the events before it as they came, then each one's output.
    let out: (Buffer | string)[] | null = null;
    let start = 0;
    for (let end = byteEventEnd(b, 0); end > 0; end = byteEventEnd(b, start)) {
      const fwd = this.byteEvent(b, start, end);
      if (fwd !== null) (out ??= start > 0 ? [b.subarray(0, start)] : []).push(fwd);
      else if (out !== null) out.push(b.subarray(start, end));
      start = end;
    }
    if (start < b.length) this.pending = Buffer.from(b.subarray(start));
    // The chunk itself when it held whole events, all unchanged, and nothing of it stays behind.
    if (out === null) return fresh && start === b.length ? chunk : start > 0 ? b.subarray(0, start) : '';
    if (out.length === 1) return out[0]!;
    return Buffer.concat(out.map((o) => (typeof o === 'string' ? Buffer.from(o) : o)));
  }

  /** A translated stream's read: its events decoded, each re-shaped by `opts.translate`. */
  private translated(chunk: Buffer): string {
    let out = '';
    if (!this.started) {
      this.started = true;
      out = this.opts.translate!.start();
    }
    for (const raw of this.events.push(chunk)) out += this.event(raw);
    return out;
  }

  onEnd(): string {
    return '';
  }

  get produced(): boolean {
    return this.producedTokens() > 0;
  }

  usage(): Usage {
    // Whole-task reports are final once the stream has ended with [DONE]: no task is left to report.
    const final = this.final || (!this.opts.runningUsage && this.reports > 0 && this.done);
    return streamUsage(this.reported, final, this.done, this.producedTokens(), () => this.progressPrompt() || (this.opts.promptTokens?.() ?? 0));
  }

  /** The prompt tokens the upstream reported in progress (every task's), 0 before any report. */
  progressPrompt(): number {
    let n = 0;
    for (const v of this.progress.values()) n += v;
    return n;
  }

  /** Tokens produced so far: reported running usage if any, else the counted deltas. */
  producedTokens(): number {
    return Math.max(this.deltas, this.reported?.output ?? 0);
  }

  /**
   * One whole event (`b[start, end)`, its blank line included): null when it goes on as it came, else what
   * goes in its place. The common chunk (one line, one object, one choice, no usage) is read by the byte
   * scan; anything else is decoded and handled as text (`event`).
   */
  private byteEvent(b: Buffer, start: number, end: number): Buffer | string | null {
    if (!(b[start] === 0x64 && b[start + 1] === 0x61 && b[start + 2] === 0x74 && b[start + 3] === 0x61 && b[start + 4] === 0x3a)) return null; // comments, event: lines, keep-alives
    let from = start + DATA.length;
    while (b[from] === 0x20) from++;
    const nl = b.indexOf(LF, from); // an event holds its blank line, so a line feed comes before `end`
    const to = b[nl - 1] === 0x0d ? nl - 1 : nl;
    // One line (its line feed, then the blank line: LF, or CR LF), one object, one choice (one finish_reason key), no usage.
    if (b[from] === 0x7b && (end === nl + 2 || (end === nl + 3 && b[nl + 1] === 0x0d)) && bytes.read(b, from, to)
      && bytes.finishReasons === 1 && !bytes.usage && !(this.opts.promptProgress && bytes.progress > 0)) {
      if (bytes.output) this.deltas++;
      const ours = this.oursBytes, at = bytes.modelFrom, e = bytes.modelTo;
      if (ours === null || at < 0 || (e - at === ours.length && holds(b, at, ours))) return null;
      return Buffer.concat([b.subarray(start, at), ours, b.subarray(e, end)]);
    }
    const raw = b.toString('utf8', start, end);
    const fwd = this.event(raw);
    return fwd === raw ? null : fwd;
  }

  /** One whole event as text: the end marker, or an event parsed whole (a translated stream's every event). */
  private event(raw: string): string {
    if (!raw.startsWith(DATA)) return raw; // comments, event: lines, keep-alives pass through
    let from = DATA.length;
    while (raw.charCodeAt(from) === 0x20) from++;
    const nl = raw.indexOf('\n', from);
    const to = raw.charCodeAt(nl - 1) === 0x0d ? nl - 1 : nl;
    if (raw.charCodeAt(from) === 0x5b && raw.slice(from, to).trim() === '[DONE]') {
      this.done = true;
      return this.opts.translate ? this.opts.translate.done(this.opts.cost?.(this.usage())) : raw;
    }
    const fwd = this.parsed(raw, raw.slice(from, to).trim());
    return fwd === raw ? this.named(raw, from, to) : fwd;
  }

  /** The event with its `model` named as Tollgate names it: the same string when it already is. */
  private named(raw: string, from: number, to: number): string {
    return this.ours === null ? raw : nameModel(raw, ['model'], this.ours, from, to);
  }

  private parsed(raw: string, payload: string): string {
    let obj: Record<string, unknown>;
    try { obj = JSON.parse(payload) as Record<string, unknown>; } catch { return raw; }
    // Not an object (llama.cpp opens a stream of several prompts with `data: null`): nothing to meter, passed on.
    if (!obj || typeof obj !== 'object' || Array.isArray(obj)) return raw;
    const usage = readUsage(obj.usage);
    if (usage) {
      const r = this.reported;
      this.reported = this.opts.runningUsage || !r ? usage
        : { input: r.input + usage.input, output: r.output + usage.output, reasoning: r.reasoning + usage.reasoning };
      this.reports++;
    }
    const choices = obj.choices as Record<string, unknown>[] | undefined;
    const pp = this.opts.promptProgress ? obj.prompt_progress as { total?: unknown } | undefined : undefined;
    if (pp && typeof pp === 'object') {
      const index = Array.isArray(choices) && typeof choices[0]?.index === 'number' ? choices[0].index : 0;
      this.progress.set(index, Math.max(this.progress.get(index) ?? 0, num(pp.total)));
      // A progress chunk carries no output (an empty delta): dropped when only Tollgate asked for it.
      if (this.opts.promptProgress === 'strip') return '';
    }
    const translated = this.opts.translate?.chunk(obj);
    if (Array.isArray(choices) && choices.length === 0 && usage) {
      this.final = true;
      if (translated !== undefined || this.opts.stripUsageChunk) return translated ?? '';
      if (!this.opts.cost || typeof obj.usage !== 'object') return raw;
      // The debit is the price of this usage (the stream's last word on it): the client reads it here.
      (obj.usage as Record<string, unknown>).cost = COST_MARK;
      if (this.opts.model !== undefined && typeof obj.model === 'string') obj.model = this.opts.model;
      return `data: ${putCost(JSON.stringify(obj), this.opts.cost(this.usage()))}\n\n`;
    }
    if (Array.isArray(choices)) {
      for (const c of choices) {
        const d = (c.delta ?? c) as Record<string, unknown>;
        const toolCalls = d.tool_calls as { function?: { arguments?: string } }[] | undefined;
        const hasText = (typeof d.content === 'string' && d.content.length > 0) || (typeof d.text === 'string' && d.text.length > 0)
          || (typeof d.reasoning_content === 'string' && d.reasoning_content.length > 0)
          || (Array.isArray(toolCalls) && toolCalls.some((t) => (t.function?.arguments ?? '').length > 0));
        if (hasText) this.deltas++;
      }
    }
    if (translated !== undefined) return translated;
    // Running usage the client did not ask for, or a task's usage on a chunk that carries choices
    // (llama.cpp's completions finish chunk) when the client did not ask for usage: the chunk goes on without it.
    if (usage && (this.opts.stripChunkUsage || this.opts.stripUsageChunk)) {
      obj.usage = null;
      if (this.opts.model !== undefined && typeof obj.model === 'string') obj.model = this.opts.model;
      return `data: ${JSON.stringify(obj)}\n\n`;
    }
    return raw;
  }
}

/**
 * Splits a byte stream into whole SSE events (each with its blank line, LF or CRLF), decoding UTF-8
 * across reads so a character cut between two of them arrives whole.
 */
export class SseEvents {
  private pending = '';
  private readonly decoder = new StringDecoder('utf8');

  /** Feeds one read; returns the events it completes, in order. */
  push(chunk: Buffer): string[] {
    const text = this.pending + this.decoder.write(chunk);
    const events: string[] = [];
    let start = 0;
    for (let end = eventEnd(text, 0); end > 0; end = eventEnd(text, start)) {
      events.push(text.slice(start, end));
      start = end;
    }
    this.pending = start === 0 ? text : text.slice(start);
    return events;
  }
}

/** The end (exclusive) of the first event from `from`: just past its blank line (LF LF or CRLF CRLF); -1 if none yet. */
function eventEnd(s: string, from: number): number {
  for (let i = s.indexOf('\n', from); i >= 0; i = s.indexOf('\n', i + 1)) {
    const next = s.charCodeAt(i + 1);
    if (next === LF) return i + 2;
    if (next === 0x0d && s.charCodeAt(i + 2) === LF) return i + 3;
  }
  return -1;
}

/** The end (exclusive) of the first event in `b` from `from`: just past its blank line (LF LF or CRLF CRLF); -1 if none yet. */
function byteEventEnd(b: Buffer, from: number): number {
  for (let i = b.indexOf(LF, from); i >= 0; i = b.indexOf(LF, i + 1)) {
    const next = b[i + 1];
    if (next === LF) return i + 2;
    if (next === 0x0d && b[i + 2] === LF) return i + 3;
  }
  return -1;
}

const isSpace = (c: number | undefined) => c === 0x20 || c === 0x09 || c === 0x0d || c === 0x0a;

/** Where the value of the key that ends just before `i` starts, or -1 when `i` is not followed by `:` (not a key). */
function valueAt(b: Buffer, i: number): number {
  while (isSpace(b[i])) i++;
  if (b[i] !== 0x3a) return -1;
  i++;
  while (isSpace(b[i])) i++;
  return i;
}

/**
 * Just past the closing quote of the JSON string that opens at `i`; -1 when it does not close before `to`. A
 * backslash escapes the byte after it; in UTF-8 no byte of a multi-byte character is a quote or a backslash.
 */
function stringEnd(b: Buffer, i: number, to: number): number {
  for (let j = i + 1; j < to; j++) {
    const c = b[j];
    if (c === 0x5c) j++;
    else if (c === 0x22) return j + 1;
  }
  return -1;
}

/** `b` holds the bytes of `key` at `at`. */
function holds(b: Buffer, at: number, key: Buffer): boolean {
  for (let k = 0; k < key.length; k++) if (b[at + k] !== key[k]) return false;
  return true;
}

const K_USAGE = Buffer.from('"usage"'), K_MODEL = Buffer.from('"model"'), K_FINISH = Buffer.from('"finish_reason"');
const K_PROGRESS = Buffer.from('"prompt_progress"'), K_CONTENT = Buffer.from('"content"'), K_TEXT = Buffer.from('"text"');
const K_REASONING = Buffer.from('"reasoning_content"'), K_ARGUMENTS = Buffer.from('"arguments"'), K_NULL = Buffer.from('null');

/**
 * What one pass over a chunk's JSON bytes found: the keys the common chunk's fast path decides on. In JSON
 * text an unescaped quote only ever delimits a string, so a quoted name followed by a colon is an object
 * key, never text inside a value: the scan cannot be fooled by what the model wrote. It reads the bytes as
 * they came: every byte it looks for is ASCII, and none is ever part of a multi-byte character, so nothing
 * is decoded. One pass of our own replaced up to nine `indexOf` scans (each key's, and the model's) and the
 * rename's second walk (docs/benchmarks.md, "The stream meter in one pass").
 */
class ChunkScan {
  /** `finish_reason` keys (one per choice). */
  finishReasons = 0;
  /** A `usage` key whose value is not null. */
  usage = false;
  /** `prompt_progress` keys. */
  progress = 0;
  /** A content, text, reasoning or arguments key with a non-empty string value: the chunk carried output. */
  output = false;
  /** The outermost object's `model` string (its quotes included), or -1. */
  modelFrom = -1;
  modelTo = -1;

  /** Scans `b` from `from` (an object's `{`) to `to`; false when the bytes are not one whole object (nothing read can be trusted then). */
  read(b: Buffer, from: number, to: number): boolean {
    this.finishReasons = 0; this.usage = false; this.progress = 0; this.output = false; this.modelFrom = -1; this.modelTo = -1;
    let depth = 0;
    for (let i = from; i < to; i++) {
      const c = b[i];
      if (c === 0x22) {
        const end = stringEnd(b, i, to);
        if (end < 0) return false;
        const v = valueAt(b, end);
        i = (v >= 0 ? this.key(b, i, end - i, v, depth, to) : end) - 1;
      } else if (c === 0x7b || c === 0x5b) depth++;
      else if (c === 0x7d || c === 0x5d) {
        if (--depth !== 0) continue;
        for (let j = i + 1; j < to; j++) if (!isSpace(b[j])) return false;
        return true;
      }
    }
    return false;
  }

  /**
   * The key `b[at, at + len)` (quotes included), its value at `v`. Returns where the scan goes on: just past
   * the key, or past the model's string once this has found its end (so it is not looked for twice).
   */
  private key(b: Buffer, at: number, len: number, v: number, depth: number, to: number): number {
    const next = at + len;
    const c1 = b[at + 1];
    switch (len) {
      case 7: // "usage" "model"
        if (c1 === 0x75 && holds(b, at, K_USAGE)) { if (!holds(b, v, K_NULL)) this.usage = true; }
        else if (c1 === 0x6d && depth === 1 && holds(b, at, K_MODEL) && b[v] === 0x22) {
          const end = stringEnd(b, v, to);
          if (end > 0) { this.modelFrom = v; this.modelTo = end; return end; }
        }
        return next;
      case 15: if (c1 === 0x66 && holds(b, at, K_FINISH)) this.finishReasons++; return next;
      case 17: if (c1 === 0x70 && holds(b, at, K_PROGRESS)) this.progress++; return next;
      case 9: if (c1 !== 0x63 || !holds(b, at, K_CONTENT)) return next; break;
      case 6: if (c1 !== 0x74 || !holds(b, at, K_TEXT)) return next; break;
      case 19: if (c1 !== 0x72 || !holds(b, at, K_REASONING)) return next; break;
      case 11: if (c1 !== 0x61 || !holds(b, at, K_ARGUMENTS)) return next; break;
      default: return next;
    }
    // An output key: a non-empty string value is output.
    if (b[v] === 0x22 && b[v + 1] !== 0x22) this.output = true;
    return next;
  }
}

/** The scan's one instance: each use reads it at once, before anything else can scan. */
const bytes = new ChunkScan();

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

// The sim's deterministic "model": one choice's output (reasoning, content or a tool call), stop strings, max tokens, logprobs.
import { countTokens, fnv1a, hex8, mulberry32, PUNCT, SPACED, tokenPieces, VOCAB } from './tokens.js';
import { schemaValue } from './schema-value.js';

type Obj = Record<string, unknown>;

export type Finish = 'stop' | 'length' | 'tool_calls';

export interface ToolCall {
  id: string;
  name: string;
  /** The whole arguments JSON string (possibly cut short by max tokens). */
  args: string;
  /** The arguments split into one-token pieces, the way they are streamed. */
  argPieces: string[];
  nameTokens: number;
}

export interface Output {
  seed: number;
  /** Reasoning text pieces, one token each (reasoning models only). */
  reasoning: string[];
  /** Content pieces, one token each; joined they are the message content. Empty for a tool call. */
  pieces: string[];
  tool: ToolCall | null;
  finish: Finish;
  /** reasoning + content (or tool name + argument) tokens. */
  tokens: number;
}

export interface GenerateOptions {
  /** max_tokens / max_completion_tokens: caps reasoning and output together. */
  maxTokens: number | null;
  stops: readonly string[];
  reasoning: boolean;
  /** The function to call, if the request asks for a tool call. */
  tool: { name: string; parameters: unknown } | null;
  /** `response_format`: JSON that conforms to a schema, or any JSON object; null for text. */
  json?: JsonOutput | null;
}

export type JsonOutput = { kind: 'schema'; schema: unknown } | { kind: 'object' };

/** The choice seed: FNV-1a of model id, the prompt's JSON, the request seed and the choice index. */
export function choiceSeed(modelId: string, promptJson: string, seed: unknown, index: number): number {
  let h = fnv1a(modelId);
  h = fnv1a('\u0000', h);
  h = fnv1a(promptJson, h);
  h = fnv1a(seed === undefined || seed === null ? '\u0000' : `\u0000${String(seed)}`, h);
  return fnv1a(`\u0000${index}`, h);
}

/** `count` one-token pieces: the first word bare, later words with a leading space, now and then a punctuation mark. */
export function wordPieces(seed: number, count: number): string[] {
  const r = mulberry32(seed);
  const out: string[] = new Array<string>(count);
  let punct = true; // never start with punctuation, never two marks in a row
  for (let i = 0; i < count; i++) {
    if (!punct && r() < 0.1) { out[i] = PUNCT[(r() * PUNCT.length) | 0]!; punct = true; continue; }
    const k = (r() * VOCAB.length) | 0;
    out[i] = i === 0 ? VOCAB[k]! : SPACED[k]!;
    punct = false;
  }
  return out;
}

export function generate(seed: number, o: GenerateOptions): Output {
  const cap = o.maxTokens ?? Number.POSITIVE_INFINITY;
  const reasoningCount = o.reasoning ? Math.min(8 + (seed % 17), cap) : 0;
  const reasoning = reasoningCount > 0 ? wordPieces(seed ^ 0x5bd1e995, reasoningCount) : [];
  const room = cap - reasoningCount;
  if (o.tool) {
    const nameTokens = countTokens(o.tool.name);
    if (room >= nameTokens) {
      const full = argumentsFor(o.tool.parameters, seed);
      let argPieces = tokenPieces(full);
      let finish: Finish = 'tool_calls';
      if (nameTokens + argPieces.length > room) { argPieces = argPieces.slice(0, room - nameTokens); finish = 'length'; }
      const id = `call_${hex8(seed)}${hex8(fnv1a('call', seed))}${hex8(fnv1a(o.tool.name, seed))}`;
      const tool: ToolCall = { id, name: o.tool.name, args: argPieces.join(''), argPieces, nameTokens };
      return { seed, reasoning, pieces: [], tool, finish, tokens: reasoningCount + nameTokens + argPieces.length };
    }
    // max tokens leave no room even for the function name: fall through to a (length-capped) text answer
  }
  if (o.json) {
    // Structured output: the JSON text, one token per piece, cut (and so unparseable, finish "length") by max tokens.
    const value = o.json.kind === 'schema' ? schemaValue(o.json.schema, seed) : { text: wordPieces(seed, 8 + (seed % 9)).join('') };
    let pieces = tokenPieces(JSON.stringify(value));
    let finish: Finish = pieces.length > room ? 'length' : 'stop';
    if (finish === 'length') pieces = pieces.slice(0, Math.max(0, room));
    const cut = stopCut(pieces, o.stops);
    if (cut) { pieces = cut; finish = 'stop'; }
    return { seed, reasoning, pieces, tool: null, finish, tokens: reasoningCount + pieces.length };
  }
  const natural = 16 + (seed % 49);
  let pieces = wordPieces(seed, Math.max(0, Math.min(natural, room)));
  let finish: Finish = natural > room ? 'length' : 'stop';
  const cut = stopCut(pieces, o.stops);
  if (cut) { pieces = cut; finish = 'stop'; }
  return { seed, reasoning, pieces, tool: null, finish, tokens: reasoningCount + pieces.length };
}

/** The pieces cut just before the earliest stop string in their text, or null when no stop string occurs. */
function stopCut(pieces: string[], stops: readonly string[]): string[] | null {
  if (stops.length === 0) return null;
  const text = pieces.join('');
  let at = -1;
  for (const s of stops) {
    if (!s) continue;
    const i = text.indexOf(s);
    if (i >= 0 && (at < 0 || i < at)) at = i;
  }
  if (at < 0) return null;
  const out: string[] = [];
  let pos = 0;
  for (const p of pieces) {
    if (pos + p.length <= at) { out.push(p); pos += p.length; continue; }
    // The stop string starts inside this piece: keep what precedes it. A bare space is no token of its own, so it
    // joins the previous piece (the text is then exactly the text before the stop string, one token per piece).
    const part = p.slice(0, at - pos);
    if (countTokens(part) > 0) out.push(part);
    else if (part && out.length > 0) out[out.length - 1] += part;
    break;
  }
  return out;
}

/** A JSON arguments string satisfying a function's `parameters` schema, deterministic from the seed. */
export function argumentsFor(schema: unknown, seed: number): string {
  const v = schemaValue(schema ?? { type: 'object' }, seed);
  return JSON.stringify(v && typeof v === 'object' && !Array.isArray(v) ? v : {});
}

/** Chat logprobs for content pieces: the chosen token first among its top `k`, then other vocabulary words. */
export function logprobEntries(out: Output, k: number): Obj[] {
  const r = mulberry32(out.seed ^ 0x9e3779b9);
  return out.pieces.map((token, i) => {
    const logprob = -Math.round(r() * 25_000) / 10_000;
    const top: Obj[] = [];
    if (k > 0) top.push({ token, logprob, bytes: utf8(token) });
    for (let j = 1; j < k; j++) {
      const at = (fnv1a(token, out.seed + i) + j * 7919) % VOCAB.length;
      let alt = i === 0 ? VOCAB[at]! : SPACED[at]!;
      if (alt === token) alt = i === 0 ? VOCAB[(at + 107) % VOCAB.length]! : SPACED[(at + 107) % VOCAB.length]!;
      top.push({ token: alt, logprob: Math.round((logprob - 0.75 * j - r()) * 10_000) / 10_000, bytes: utf8(alt) });
    }
    return { token, logprob, bytes: utf8(token), top_logprobs: top };
  });
}

function utf8(s: string): number[] {
  return Array.from(Buffer.from(s, 'utf8'));
}

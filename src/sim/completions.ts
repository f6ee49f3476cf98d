// POST /v1/chat/completions and /v1/completions: request checks, one generation per choice, non-streaming bodies.
import { randomBytes } from 'node:crypto';
import { choiceSeed, generate, logprobEntries, type JsonOutput, type Output } from './generate.js';
import { SimError } from './http.js';
import { chatPromptTokens, countTokens } from '../meter/tokens.js';

export { chatPromptTokens };
import type { SimModel } from './index.js';

type Obj = Record<string, unknown>;

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  completion_tokens_details?: { reasoning_tokens: number };
}

/** Everything needed to answer one completion request, whole or streamed. */
export interface Job {
  kind: 'chat' | 'text';
  modelId: string;
  reasoning: boolean;
  id: string;
  created: number;
  /** One output per choice, in `index` order. */
  outputs: Output[];
  promptTokens: number;
  usage: Usage;
  stream: boolean;
  includeUsage: boolean;
  continuous: boolean;
  /** Chat `logprobs: true`: how many top_logprobs per token; null when not asked. */
  topLogprobs: number | null;
}

const ID_PREFIX = randomBytes(6).toString('hex');
let idCounter = 0;
function nextId(prefix: string): string {
  idCounter = (idCounter + 1) % 0x1000000000000;
  return `${prefix}-${ID_PREFIX}${idCounter.toString(16).padStart(12, '0')}`;
}

function int(body: Obj, name: string, min: number, max: number): number | null {
  const v = body[name];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new SimError(400, `'${name}' must be an integer from ${min} to ${max}.`, name);
  }
  return v;
}

function stops(body: Obj): string[] {
  const v = body.stop;
  if (v === undefined || v === null) return [];
  if (typeof v === 'string') return [v];
  if (Array.isArray(v) && v.length <= 4 && v.every((s) => typeof s === 'string')) return v as string[];
  throw new SimError(400, "'stop' must be a string or an array of up to 4 strings.", 'stop');
}

function streamFlags(body: Obj): { stream: boolean; includeUsage: boolean; continuous: boolean } {
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') throw new SimError(400, "'stream' must be a boolean.", 'stream');
  const so = body.stream_options;
  if (so !== undefined && so !== null && (typeof so !== 'object' || Array.isArray(so))) throw new SimError(400, "'stream_options' must be an object.", 'stream_options');
  const o = (so ?? {}) as Obj;
  return { stream: body.stream === true, includeUsage: o.include_usage === true, continuous: o.continuous_usage_stats === true };
}

function usageOf(prompt: number, outputs: Output[], reasoning: boolean): Usage {
  let completion = 0;
  let thought = 0;
  for (const o of outputs) { completion += o.tokens; thought += o.reasoning.length; }
  const u: Usage = { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
  if (reasoning) u.completion_tokens_details = { reasoning_tokens: thought };
  return u;
}

/** The function the request makes the model call, or null for a text answer. */
function pickTool(body: Obj): { name: string; parameters: unknown } | null {
  const choice = body.tool_choice;
  if (body.tools === undefined || body.tools === null) {
    if (choice === 'required' || (choice && typeof choice === 'object')) throw new SimError(400, "'tool_choice' needs 'tools'.", 'tool_choice');
    return null;
  }
  if (!Array.isArray(body.tools)) throw new SimError(400, "'tools' must be an array.", 'tools');
  const fns: { name: string; parameters: unknown }[] = [];
  body.tools.forEach((t: Obj, i) => {
    if (!t || typeof t !== 'object' || t.type !== 'function') return;
    const f = t.function as Obj | undefined;
    if (!f || typeof f.name !== 'string' || f.name === '') throw new SimError(400, `'tools[${i}].function.name' is required.`, `tools[${i}].function.name`);
    fns.push({ name: f.name, parameters: f.parameters });
  });
  if (choice === 'none' || fns.length === 0) return null;
  if (choice === undefined || choice === null || choice === 'auto' || choice === 'required') return fns[0]!;
  const name = typeof choice === 'object' ? ((choice as Obj).function as Obj | undefined)?.name : undefined;
  if (typeof name !== 'string') throw new SimError(400, "'tool_choice' must be none, auto, required or {type: function, function: {name}}.", 'tool_choice');
  const f = fns.find((x) => x.name === name);
  if (!f) throw new SimError(400, `'tool_choice' names ${name}, which is not among 'tools'.`, 'tool_choice');
  return f;
}

/** `response_format`: JSON conforming to `json_schema.schema`, any JSON object, or (text, absent) plain text. */
function jsonFormat(body: Obj): JsonOutput | null {
  const f = body.response_format;
  if (f === undefined || f === null) return null;
  if (typeof f !== 'object' || Array.isArray(f)) throw new SimError(400, "'response_format' must be an object.", 'response_format');
  const type = (f as Obj).type;
  if (type === 'text') return null;
  if (type === 'json_object') return { kind: 'object' };
  if (type !== 'json_schema') throw new SimError(400, "'response_format.type' must be text, json_object or json_schema.", 'response_format.type');
  const js = (f as Obj).json_schema as Obj | null | undefined;
  if (!js || typeof js !== 'object' || typeof js.name !== 'string' || js.name === '') {
    throw new SimError(400, "'response_format.json_schema.name' is required.", 'response_format.json_schema.name');
  }
  if (js.schema !== undefined && (js.schema === null || typeof js.schema !== 'object')) {
    throw new SimError(400, "'response_format.json_schema.schema' must be a JSON Schema object.", 'response_format.json_schema.schema');
  }
  return { kind: 'schema', schema: js.schema ?? { type: 'object' } };
}

export function chatJob(model: SimModel, body: Obj): Job {
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) throw new SimError(400, "'messages' is required and must be a non-empty array.", 'messages');
  messages.forEach((m: Obj, i) => {
    if (!m || typeof m !== 'object' || typeof m.role !== 'string') throw new SimError(400, `'messages[${i}].role' is required.`, `messages[${i}].role`);
  });
  const n = int(body, 'n', 1, 128) ?? 1;
  const maxTokens = int(body, 'max_completion_tokens', 1, 1_000_000) ?? int(body, 'max_tokens', 1, 1_000_000);
  let topLogprobs: number | null = null;
  if (body.logprobs === true) topLogprobs = int(body, 'top_logprobs', 0, 20) ?? 0;
  const flags = streamFlags(body);
  const opts = { maxTokens, stops: stops(body), reasoning: Boolean(model.reasoning), tool: pickTool(body), json: jsonFormat(body) };
  const json = JSON.stringify(messages);
  const outputs: Output[] = [];
  for (let i = 0; i < n; i++) outputs.push(generate(choiceSeed(model.id, json, body.seed, i), opts));
  const promptTokens = chatPromptTokens(messages as Obj[]);
  return {
    kind: 'chat', modelId: model.id, reasoning: opts.reasoning, id: nextId('chatcmpl'), created: Math.floor(Date.now() / 1000),
    outputs, promptTokens, usage: usageOf(promptTokens, outputs, opts.reasoning), ...flags, topLogprobs,
  };
}

/** Legacy completions: one set of `n` choices per prompt (as OpenAI and vLLM do); max_tokens defaults to 16. */
export function textJob(model: SimModel, body: Obj): Job {
  const p = body.prompt;
  let prompts: (string | number[])[];
  if (typeof p === 'string') prompts = [p];
  else if (Array.isArray(p) && p.length > 0 && p.every((x) => typeof x === 'number')) prompts = [p as number[]];
  else if (Array.isArray(p) && p.length > 0 && p.every((x) => typeof x === 'string' || (Array.isArray(x) && x.every((y) => typeof y === 'number')))) {
    prompts = p as (string | number[])[];
  } else throw new SimError(400, "'prompt' is required: a string, an array of strings, or token arrays.", 'prompt');
  const n = int(body, 'n', 1, 128) ?? 1;
  const maxTokens = int(body, 'max_tokens', 1, 1_000_000) ?? 16;
  const flags = streamFlags(body);
  const opts = { maxTokens, stops: stops(body), reasoning: false, tool: null };
  const outputs: Output[] = [];
  let promptTokens = 0;
  for (const one of prompts) {
    promptTokens += typeof one === 'string' ? countTokens(one) : one.length;
    const json = JSON.stringify(one);
    for (let i = 0; i < n; i++) outputs.push(generate(choiceSeed(model.id, json, body.seed, i), opts));
  }
  return {
    kind: 'text', modelId: model.id, reasoning: false, id: nextId('cmpl'), created: Math.floor(Date.now() / 1000),
    outputs, promptTokens, usage: usageOf(promptTokens, outputs, false), ...flags, topLogprobs: null,
  };
}

/** The whole (non-streaming) response body. */
export function completionBody(job: Job): string {
  if (job.kind === 'text') {
    return JSON.stringify({
      id: job.id, object: 'text_completion', created: job.created, model: job.modelId,
      choices: job.outputs.map((o, index) => ({ text: o.pieces.join(''), index, logprobs: null, finish_reason: o.finish })),
      usage: job.usage,
    });
  }
  return JSON.stringify({
    id: job.id, object: 'chat.completion', created: job.created, model: job.modelId,
    choices: job.outputs.map((o, index) => {
      const message: Obj = { role: 'assistant', content: o.tool ? null : o.pieces.join(''), refusal: null };
      if (job.reasoning) message.reasoning_content = o.reasoning.join('');
      if (o.tool) message.tool_calls = [{ id: o.tool.id, type: 'function', function: { name: o.tool.name, arguments: o.tool.args } }];
      const logprobs = job.topLogprobs === null ? null : { content: o.tool ? null : logprobEntries(o, job.topLogprobs), refusal: null };
      return { index, message, logprobs, finish_reason: o.finish };
    }),
    usage: job.usage,
  });
}

// Responses API ⇄ chat completions: the request mapping and the buffered reply mapping (LiteLLM's approach).
import { randomBytes } from 'node:crypto';
import { rejectAsked, unsupported } from '../validate.js';

export const RESPONSES_REJECTED = ['previous_response_id', 'conversation', 'background', 'prompt_cache_key'] as const;

/**
 * Responses-only parameters a chat completions upstream has no counterpart for: they would be dropped on
 * the way, so a value that asks for something is refused (null and false ask for nothing).
 */
export const RESPONSES_ONLY = ['prompt', 'max_tool_calls', 'context_management', 'moderation', 'background_options'] as const;

// Fields that the translation consumes; everything else passes to the chat request untouched.
const CONSUMED = new Set(['input', 'instructions', 'max_output_tokens', 'tools', 'tool_choice', 'text', 'reasoning',
  'metadata', 'store', 'include', 'truncation', 'stream', 'stream_options', 'model', 'parallel_tool_calls', 'top_logprobs', 'image', 'access_programs',
  ...RESPONSES_ONLY]);

/** What a Response made from a chat completion cannot carry, refused by name when asked for. */
function rejectUnmappable(req: Obj): void {
  rejectAsked(req, RESPONSES_ONLY);
  if (Array.isArray(req.include) && req.include.length > 0) throw unsupported('include', 'no additional output data is available here');
  if (req.truncation != null && req.truncation !== 'disabled') throw unsupported('truncation', 'only "disabled" is available here');
  // Their defaults (`auto` image compression, the Standard access program) are what a chat upstream does anyway.
  const image = req.image as Obj | null | undefined;
  if (image?.context_compression != null && image.context_compression !== 'auto') throw unsupported('image.context_compression', 'only "auto" is available here');
  const access = req.access_programs as Obj | null | undefined;
  if (access?.cyber != null && access.cyber !== 'standard') throw unsupported('access_programs.cyber', 'only "standard" is available here');
  if (typeof req.top_logprobs === 'number' && req.top_logprobs > 0) throw unsupported('top_logprobs', 'log probabilities are not returned in responses here');
  const text = req.text as Obj | null | undefined;
  if (text?.verbosity != null && text.verbosity !== 'medium') throw unsupported('text.verbosity', 'only "medium" is available here');
  const reasoning = req.reasoning as Obj | null | undefined;
  if (reasoning?.summary != null) throw unsupported('reasoning.summary', 'reasoning summaries are not available here');
  if (reasoning?.generate_summary != null) throw unsupported('reasoning.generate_summary', 'reasoning summaries are not available here');
}

export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString('hex')}`;
}

type Obj = Record<string, unknown>;

function textOf(content: unknown): unknown {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return content;
  return content.map((p: Obj) => {
    if (p.type === 'input_text' || p.type === 'output_text' || p.type === 'text') return { type: 'text', text: p.text };
    if (p.type === 'input_image') return { type: 'image_url', image_url: { url: p.image_url, ...(p.detail ? { detail: p.detail } : {}) } };
    throw unsupported('input', `content part type "${String(p.type)}" is not supported`);
  });
}

/** Maps a Responses request to a chat completions body; throws 400 for what cannot be honoured. */
export function toChat(req: Obj, upstreamModel: string): Obj {
  rejectUnmappable(req);
  const messages: Obj[] = [];
  if (typeof req.instructions === 'string' && req.instructions) messages.push({ role: 'system', content: req.instructions });
  const input = req.input;
  if (typeof input === 'string') messages.push({ role: 'user', content: input });
  else if (Array.isArray(input)) {
    for (const item of input as Obj[]) {
      const type = item.type ?? 'message';
      if (type === 'message') {
        messages.push({ role: item.role === 'developer' ? 'system' : item.role, content: textOf(item.content) });
      } else if (type === 'function_call') {
        const prev = messages.at(-1);
        const call = { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } };
        if (prev && prev.role === 'assistant' && Array.isArray(prev.tool_calls)) (prev.tool_calls as Obj[]).push(call);
        else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
      } else if (type === 'function_call_output') {
        messages.push({ role: 'tool', tool_call_id: item.call_id, content: typeof item.output === 'string' ? item.output : JSON.stringify(item.output) });
      } else if (type === 'reasoning') {
        continue; // a prior reasoning item carries nothing a chat model can take back
      } else throw unsupported('input', `input item type "${String(type)}" is not supported`);
    }
  }
  const chat: Obj = { model: upstreamModel, messages };
  for (const [k, v] of Object.entries(req)) if (!CONSUMED.has(k)) chat[k] = v;
  if (req.max_output_tokens != null) chat.max_tokens = req.max_output_tokens;
  if (req.parallel_tool_calls != null) chat.parallel_tool_calls = req.parallel_tool_calls;
  if (Array.isArray(req.tools) && req.tools.length > 0) {
    chat.tools = (req.tools as Obj[]).map((t) => {
      if (t.type !== 'function') throw unsupported('tools', `built-in tool "${String(t.type)}" is not available`);
      return { type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters, ...(t.strict != null ? { strict: t.strict } : {}) } };
    });
  }
  const tc = req.tool_choice;
  if (typeof tc === 'string') chat.tool_choice = tc;
  else if (tc && typeof tc === 'object') {
    if ((tc as Obj).type !== 'function') throw unsupported('tool_choice', 'only function tools are available');
    chat.tool_choice = { type: 'function', function: { name: (tc as Obj).name } };
  }
  const format = (req.text as Obj | undefined)?.format as Obj | undefined;
  if (format?.type === 'json_schema') {
    chat.response_format = { type: 'json_schema', json_schema: { name: format.name, schema: format.schema, ...(format.strict != null ? { strict: format.strict } : {}) } };
  } else if (format?.type === 'json_object') chat.response_format = { type: 'json_object' };
  const effort = (req.reasoning as Obj | undefined)?.effort;
  if (effort) chat.reasoning_effort = effort;
  if (req.stream === true) { chat.stream = true; chat.stream_options = { include_usage: true }; }
  return chat;
}

export interface ResponseShell { id: string; createdAt: number; req: Obj; model: string }

/** The Response object around an output list, as OpenAI returns it. */
export function responseObject(sh: ResponseShell, status: string, output: Obj[], usage: Obj | null, incomplete: string | null): Obj {
  const r = sh.req;
  return {
    id: sh.id, object: 'response', created_at: sh.createdAt, status,
    background: false, error: null, incomplete_details: incomplete ? { reason: incomplete } : null,
    instructions: r.instructions ?? null, max_output_tokens: r.max_output_tokens ?? null, model: sh.model, output,
    parallel_tool_calls: r.parallel_tool_calls ?? true, previous_response_id: null,
    reasoning: { effort: (r.reasoning as Obj | undefined)?.effort ?? null, summary: null },
    store: false, temperature: r.temperature ?? 1, text: r.text ?? { format: { type: 'text' } },
    tool_choice: r.tool_choice ?? 'auto', tools: ((r.tools as Obj[] | undefined) ?? []).map(echoTool), top_p: r.top_p ?? 1, truncation: 'disabled',
    usage, user: r.user ?? null, metadata: r.metadata ?? {},
  };
}

export function usageObject(input: number, output: number, reasoning: number): Obj {
  return {
    input_tokens: input, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    output_tokens: output, output_tokens_details: { reasoning_tokens: reasoning }, total_tokens: input + output,
  };
}

/** A buffered chat completion as a Response. */
export function fromChat(sh: ShellLike, chat: Obj): Obj {
  const choice = ((chat.choices as Obj[] | undefined) ?? [])[0] ?? {};
  const msg = (choice.message ?? {}) as Obj;
  const output: Obj[] = [];
  if (typeof msg.content === 'string' && msg.content.length > 0) {
    output.push({ type: 'message', id: newId('msg'), status: 'completed', role: 'assistant',
      content: [{ type: 'output_text', text: msg.content, annotations: [], logprobs: [] }] });
  }
  for (const tc of (msg.tool_calls as Obj[] | undefined) ?? []) {
    const fn = (tc.function ?? {}) as Obj;
    output.push({ type: 'function_call', id: newId('fc'), call_id: tc.id, name: fn.name, arguments: fn.arguments ?? '', status: 'completed' });
  }
  const u = (chat.usage ?? {}) as Obj;
  const details = (u.completion_tokens_details ?? {}) as Obj;
  const incomplete = choice.finish_reason === 'length' ? 'max_output_tokens' : choice.finish_reason === 'content_filter' ? 'content_filter' : null;
  return responseObject(sh, incomplete ? 'incomplete' : 'completed', output,
    usageObject(Number(u.prompt_tokens ?? 0), Number(u.completion_tokens ?? 0), Number(details.reasoning_tokens ?? 0)), incomplete);
}

type ShellLike = ResponseShell;

/** A function tool as a Response echoes it: `strict` and `parameters` always present (null when not set). */
function echoTool(t: Obj): Obj {
  return t.type === 'function' ? { ...t, strict: t.strict ?? null, parameters: t.parameters ?? null } : t;
}

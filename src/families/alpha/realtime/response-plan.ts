// A response.create checked before it runs: its fields (nothing it asks for is dropped), its modalities and voice, and the chat request it becomes.
import { OPENAI_VOICES } from '../../../resolve/voices.js';
import type { SessionContext } from './context.js';
import { chatMessages, clientItem } from './conversation.js';
import { checkFormat, checkMaxOutput, checkModalities } from './session-config.js';
import { rid, RtError, type Active, type Obj } from './protocol.js';

/** Realtime tools ({type, name, description, parameters}) as chat tools; tool_choice likewise. */
function chatTools(tools: unknown): Obj[] | undefined {
  if (!Array.isArray(tools) || tools.length === 0) return undefined;
  return (tools as Obj[]).map((t, i) => {
    if (t?.type !== 'function' || typeof t.name !== 'string') throw new RtError('unsupported_parameter', `tools[${i}]`, 'only function tools are available here.');
    return { type: 'function', function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), ...(t.parameters !== undefined ? { parameters: t.parameters } : {}) } };
  });
}

function chatToolChoice(c: unknown): unknown {
  if (c === undefined || typeof c === 'string') return c;
  const o = c as Obj;
  if (o?.type === 'function' && typeof o.name === 'string') return { type: 'function', function: { name: o.name } };
  throw new RtError('invalid_value', 'tool_choice', 'tool_choice must be auto, none, required or {"type": "function", "name": ...}.');
}

/** What a response.create may carry (GA names, and the beta's `modalities` and `max_response_output_tokens`, `temperature`). */
const RESPONSE_FIELDS = new Set(['conversation', 'input', 'instructions', 'max_output_tokens', 'max_response_output_tokens', 'metadata', 'output_modalities', 'modalities',
  'audio', 'tool_choice', 'tools', 'temperature', 'voice', 'output_audio_format']);

/** A checked response, built when it runs. */
export interface Plan {
  maxOut: number;
  outOfBand: boolean;
  metadata: unknown;
  modalities: string[];
  /** Audio output: the voice (an OpenAI voice name) and speed to speak the reply with. */
  speech: { voice: string; speed: number } | null;
  build(): { body: Obj; messages: Obj[] };
}

/**
 * Checks a response's parameters (an RtError names the first refused one) and returns the response
 * and its plan; the conversation it answers is read when it runs, so a turn still being transcribed
 * is in it.
 */
export function planResponse(ctx: SessionContext, r: Obj): { a: Active; plan: Plan } {
  // Nothing a response asks for is dropped: a field this gateway does not act on is refused.
  for (const [k, v] of Object.entries(r)) {
    if (v === undefined || RESPONSE_FIELDS.has(k)) continue;
    if (k === 'prompt' && v === null) continue;
    throw new RtError(k === 'prompt' ? 'unsupported_parameter' : 'unknown_parameter', `response.${k.slice(0, 40)}`,
      k === 'prompt' ? 'Stored prompts are not available here; send instructions.' : `Unknown parameter: 'response.${k.slice(0, 40)}'.`);
  }
  const outAudio = r.audio === undefined ? {} : r.audio as Obj;
  if (!outAudio || typeof outAudio !== 'object' || Object.keys(outAudio).some((k) => k !== 'output')) throw new RtError('invalid_value', 'response.audio', 'response.audio may only have output ({voice, format}).');
  for (const k of Object.keys((outAudio.output ?? {}) as Obj)) if (k !== 'voice' && k !== 'format') throw new RtError('unknown_parameter', `response.audio.output.${k.slice(0, 40)}`, `Unknown parameter: 'response.audio.output.${k.slice(0, 40)}'.`);
  const mods = r.output_modalities ?? r.modalities;
  const modalities = mods === undefined ? ctx.session.output_modalities as string[] : checkModalities(mods, 'response.output_modalities', ctx.caps);
  const spoken = modalities.includes('audio');
  const out = (r.audio as { output?: Obj } | undefined)?.output ?? {};
  const voice = out.voice ?? r.voice ?? (ctx.session.audio as { output: Obj }).output.voice;
  if (typeof voice !== 'string' || !OPENAI_VOICES.includes(voice)) throw new RtError('invalid_value', 'response.audio.output.voice', `voice must be one of ${OPENAI_VOICES.join(', ')}.`);
  if (out.format !== undefined) checkFormat(out.format, 'response.audio.output.format');
  if (r.output_audio_format !== undefined) checkFormat(r.output_audio_format, 'response.output_audio_format');
  const maxOut = r.max_output_tokens ?? r.max_response_output_tokens ?? ctx.session.max_output_tokens;
  const limit = checkMaxOutput(maxOut, 'response.max_output_tokens', ctx.model);
  const instructions = typeof r.instructions === 'string' ? r.instructions : ctx.session.instructions as string;
  const tools = chatTools(r.tools ?? ctx.session.tools);
  const toolChoice = tools ? chatToolChoice(r.tool_choice ?? ctx.session.tool_choice) : undefined;
  const outOfBand = r.conversation === 'none';
  const extra = Array.isArray(r.input) ? (r.input as unknown[]).map((x, i) => clientItem(x, `response.input[${i}]`)) : [];
  const temperature = typeof r.temperature === 'number' ? r.temperature : typeof ctx.session.temperature === 'number' ? ctx.session.temperature : undefined;
  const a: Active = { id: rid('resp'), stop: new AbortController(), itemIds: [], finished: null, cancelled: false, cancelReason: 'client_cancelled', dropped: false };
  const plan: Plan = {
    maxOut: limit === 'inf' ? ctx.model.maxOutputTokens : limit, outOfBand, metadata: r.metadata ?? null, modalities,
    speech: spoken ? { voice, speed: (ctx.session.audio as { output: Obj }).output.speed as number ?? 1 } : null,
    build: () => {
      const messages = chatMessages(instructions, outOfBand ? extra : [...ctx.items, ...extra]);
      const body: Obj = { model: ctx.model.upstreamModel, messages, stream: true, stream_options: { include_usage: true } };
      if (limit !== 'inf') body.max_tokens = limit;
      if (tools) { body.tools = tools; if (toolChoice !== undefined) body.tool_choice = toolChoice; }
      if (temperature !== undefined) body.temperature = temperature;
      return { body, messages };
    },
  };
  return { a, plan };
}

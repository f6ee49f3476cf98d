// WS /alpha/v1/realtime?model=...: OpenAI's realtime protocol (GA events), text turns run through the chat model, billed per response.
import type { Services } from '../../services.js';
import type { ModelConfig } from '../../config.js';
import { GatewayError } from '../../errors.js';
import { Charge } from '../../exchange/charge.js';
import { price } from '../../ledger/pricing.js';
import { SseMeter } from '../../meter/sse.js';
import { chatPromptTokens } from '../../meter/tokens.js';
import { base62 } from '../../store/ids.js';
import { log } from '../../observe/log.js';
import type { KeyRecord } from '../../store/keys.js';
import { socketKey, type SessionHandler, type SessionSocket, type SocketRoute, type UpgradeRequest } from '../../server/ws.js';
import { presentedKey } from '../../gate/auth.js';
import type { UpstreamCall } from '../../proxy/upstream.js';
import { alpha } from './family.js';

type Obj = Record<string, unknown>;

/** A protocol id (`item_...`, `event_...`, `resp_...`, `call_...`). */
function rid(prefix: string): string { return `${prefix}_${base62(16)}`; }

/** Close codes: 1001 going away, 1008 a policy refusal (balance, rate). */
const GOING_AWAY = 1001;
const POLICY = 1008;

/** The browser's key-carrying subprotocols (the family's own, and ours). */
export const REALTIME_KEY_PROTOCOLS = ['openai-insecure-api-key.', 'alpha-insecure-api-key.'];

/** Older (beta) client event names, accepted as their GA names. */
const CLIENT_ALIASES: Record<string, string> = { 'transcription_session.update': 'session.update' };

/** Authenticates a presented secret that is not a Tollgate key (an ephemeral client secret); null when it is not one. */
export type SecretAuthenticator = (presented: string) => Promise<{ key: KeyRecord; session: Obj } | null>;

export function realtimeRoute(s: Services, secrets?: SecretAuthenticator): SocketRoute {
  // A secret's grant, from its authentication at the upgrade to the session's accept (the same upgrade).
  const grants = new Map<string, Obj>();
  const route: SocketRoute = {
    path: '/v1/realtime', name: 'realtime', scope: 'llm',
    maxMessageBytes: 4 * 1024 * 1024,
    keyFrom: { protocolPrefixes: REALTIME_KEY_PROTOCOLS },
    ...(secrets ? { authenticate: async (presented: string) => {
      const g = await secrets(presented);
      if (!g) return null;
      grants.set(presented, g.session);
      // Read by this upgrade's accept; an upgrade refused before it (scope, shutdown) leaves nothing behind.
      setTimeout(() => grants.delete(presented), 30_000).unref();
      return g.key;
    } } : {}),
    async accept(req, key, socket) {
      const presented = presentedKey(req.headers) ?? socketKey(route, req);
      const minted = presented === null ? undefined : grants.get(presented);
      if (presented !== null) grants.delete(presented);
      const model = realtimeModel(s, req, minted);
      // The session is admitted now (balance, ceiling, rpm, its concurrency slot) with nothing held.
      const charge = await Charge.open(s, { key: key!, id: socket.id, model, reason: 'realtime',
        worst: { inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: 0, audioOutMs: 0 } });
      let session = defaultSession(socket.id, model.id);
      // A session opened with a client secret starts with the configuration the secret was minted with.
      if (minted) {
        try { session = updatedSession(session, { ...minted, model: undefined, id: undefined, object: undefined, expires_at: undefined }, model); } catch (e) {
          await charge.release();
          if (e instanceof RtError) throw new GatewayError({ status: 400, code: 'invalid_value', param: e.param, message: e.message });
          throw e;
        }
      }
      return new Realtime(s, socket, model, charge, req.headers, session);
    },
  };
  return route;
}

/**
 * A chat model, or a `realtime` model: its text turns go to its upstream's chat completions as its
 * `upstream_model` (a chat model there), priced at its own token prices.
 */
export function chatOrRealtime(s: Services, name: string): ModelConfig {
  const m = s.models.find(name);
  return m?.kind === 'realtime' ? m : s.models.resolve(name, 'chat');
}

/** `?model=` (or the model a client secret was minted for): a chat model of the config, or an alias of one (`gpt-realtime` mapped onto it). */
function realtimeModel(s: Services, req: UpgradeRequest, minted: Obj | undefined): ModelConfig {
  const asked = req.query.get('model');
  const bound = typeof minted?.model === 'string' && minted.model !== '' ? minted.model : null;
  const name = asked ?? bound;
  if (!name) throw new GatewayError({ status: 400, code: 'invalid_value', param: 'model', message: 'The `model` query parameter is required: /v1/realtime?model=<a chat model>.' });
  const model = chatOrRealtime(s, name);
  if (bound && chatOrRealtime(s, bound).id !== model.id) {
    throw new GatewayError({ status: 400, code: 'invalid_value', param: 'model', message: `This client secret was minted for ${bound}, not ${asked}.` });
  }
  return model;
}

export /** What a session's checks need of its model. */
type Limits = Pick<ModelConfig, 'id' | 'maxOutputTokens'>;

export class RtError extends Error {
  constructor(readonly code: string, readonly param: string | null, message: string, readonly type = 'invalid_request_error') { super(message); }
}

/** The GA session a new socket starts with: text out, PCM 24 kHz formats, server VAD described (audio turns are not served yet). */
export function defaultSession(id: string, model: string): Obj {
  return {
    type: 'realtime', object: 'realtime.session', id, model, output_modalities: ['text'], instructions: '',
    audio: {
      input: { format: { type: 'audio/pcm', rate: 24000 }, transcription: null, noise_reduction: null,
        turn_detection: { type: 'server_vad', threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, create_response: true, interrupt_response: true, idle_timeout_ms: null } },
      output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'alloy', speed: 1 },
    },
    tools: [], tool_choice: 'auto', max_output_tokens: 'inf', tracing: null, truncation: 'auto', prompt: null, include: null,
    expires_at: 0,
  };
}

const BAD_G711 = new Set(['audio/pcmu', 'audio/pcma', 'pcmu', 'pcma', 'g711_ulaw', 'g711_alaw']);

function checkFormat(f: unknown, param: string): Obj {
  const type = typeof f === 'string' ? f : (f as Obj | null)?.type;
  if (typeof type !== 'string') throw new RtError('invalid_value', param, `${param} must be {"type": "audio/pcm", "rate": 24000}.`);
  if (BAD_G711.has(type)) throw new RtError('unsupported_parameter', param, `${param} ${type} (G.711) is not available here; use audio/pcm at 24000 Hz.`);
  if (type !== 'audio/pcm' && type !== 'pcm16') throw new RtError('invalid_value', param, `${param} "${type.slice(0, 40)}" is not a realtime audio format; use audio/pcm at 24000 Hz.`);
  const rate = typeof f === 'object' && f !== null ? (f as Obj).rate : undefined;
  if (rate !== undefined && rate !== 24000) throw new RtError('invalid_value', `${param}.rate`, 'audio/pcm is 24000 Hz only.');
  return { type: 'audio/pcm', rate: 24000 };
}

function checkTurnDetection(t: unknown, param: string): Obj | null {
  if (t === null) return null;
  const type = (t as Obj | undefined)?.type;
  if (type !== 'server_vad') {
    throw new RtError(type === 'semantic_vad' ? 'unsupported_parameter' : 'invalid_value', `${param}.type`,
      `${param}.type must be "server_vad" or the whole field null; ${typeof type === 'string' ? `"${type.slice(0, 40)}" is not available here` : 'it is missing'}.`);
  }
  return { type: 'server_vad', threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, create_response: true, interrupt_response: true, idle_timeout_ms: null, ...(t as Obj) };
}

/**
 * Applies a `session.update` to a copy of the session (GA shape; the beta's flat fields mapped onto
 * it): the copy, or an RtError naming the field, the session untouched.
 */
export function updatedSession(current: Obj, update: Obj, model: Limits): Obj {
  const next = structuredClone(current) as Obj & { audio: { input: Obj; output: Obj } };
  const u = { ...update };
  if (u.type !== undefined && u.type !== 'realtime') throw new RtError('unsupported_parameter', 'session.type', `session.type "${String(u.type).slice(0, 40)}" is not available here; only "realtime".`);
  if (u.model !== undefined && u.model !== current.model && u.model !== model.id) throw new RtError('invalid_value', 'session.model', 'The model of a session cannot be changed.');
  // The beta's flat fields.
  if (u.modalities !== undefined) u.output_modalities = u.modalities;
  if (u.max_response_output_tokens !== undefined) u.max_output_tokens = u.max_response_output_tokens;
  const audio = (u.audio ?? {}) as { input?: Obj; output?: Obj };
  const input = { ...(audio.input ?? {}) };
  const output = { ...(audio.output ?? {}) };
  if (u.input_audio_format !== undefined) input.format = u.input_audio_format;
  if (u.output_audio_format !== undefined) output.format = u.output_audio_format;
  if (u.turn_detection !== undefined) input.turn_detection = u.turn_detection;
  if (u.input_audio_transcription !== undefined) input.transcription = u.input_audio_transcription;
  if (u.voice !== undefined) output.voice = u.voice;
  const beta = u.input_audio_format !== undefined || u.output_audio_format !== undefined;
  if (input.format !== undefined) next.audio.input.format = checkFormat(input.format, beta && u.input_audio_format !== undefined ? 'session.input_audio_format' : 'session.audio.input.format');
  if (output.format !== undefined) next.audio.output.format = checkFormat(output.format, beta && u.output_audio_format !== undefined ? 'session.output_audio_format' : 'session.audio.output.format');
  if (input.turn_detection !== undefined) next.audio.input.turn_detection = checkTurnDetection(input.turn_detection, u.turn_detection !== undefined ? 'session.turn_detection' : 'session.audio.input.turn_detection');
  for (const k of ['transcription', 'noise_reduction'] as const) if (input[k] !== undefined) next.audio.input[k] = input[k];
  for (const k of ['voice', 'speed'] as const) if (output[k] !== undefined) next.audio.output[k] = output[k];
  if (u.output_modalities !== undefined) {
    const m = u.output_modalities;
    if (!Array.isArray(m) || m.length === 0 || m.some((x) => x !== 'text' && x !== 'audio')) throw new RtError('invalid_value', 'session.output_modalities', 'output_modalities must be ["text"] or ["audio"].');
    if (m.includes('audio')) throw new RtError('unsupported_parameter', 'session.output_modalities', 'Audio output is not available here yet; use ["text"].');
    next.output_modalities = ['text'];
  }
  if (u.instructions !== undefined) {
    if (typeof u.instructions !== 'string') throw new RtError('invalid_value', 'session.instructions', 'instructions must be a string.');
    next.instructions = u.instructions;
  }
  if (u.max_output_tokens !== undefined) next.max_output_tokens = checkMaxOutput(u.max_output_tokens, 'session.max_output_tokens', model);
  if (u.tools !== undefined) { if (!Array.isArray(u.tools)) throw new RtError('invalid_value', 'session.tools', 'tools must be a list.'); next.tools = u.tools; }
  if (u.tool_choice !== undefined) next.tool_choice = u.tool_choice;
  // Everything else is kept and echoed (temperature, tracing, truncation, prompt, include...).
  const handled = new Set(['type', 'model', 'modalities', 'max_response_output_tokens', 'audio', 'input_audio_format', 'output_audio_format', 'turn_detection',
    'input_audio_transcription', 'voice', 'output_modalities', 'instructions', 'max_output_tokens', 'tools', 'tool_choice']);
  for (const [k, v] of Object.entries(u)) if (!handled.has(k) && v !== undefined && k !== 'id' && k !== 'object') next[k] = v;
  return next;
}

function checkMaxOutput(v: unknown, param: string, model: Limits): number | 'inf' {
  if (v === 'inf') return 'inf';
  if (!Number.isInteger(v) || (v as number) < 1) throw new RtError('invalid_value', param, `${param} must be a whole number of tokens or "inf".`);
  if ((v as number) > model.maxOutputTokens) throw new RtError('invalid_value', param, `${param} is at most ${model.maxOutputTokens} for ${model.id}.`);
  return v as number;
}

interface Item { id: string; type: string; role?: string; status?: string; content?: Obj[]; call_id?: string; name?: string; arguments?: string; output?: string; object?: string }

/** A client item (message with text content, function_call, function_call_output), checked and given an id. */
function clientItem(raw: unknown, param: string): Item {
  if (!raw || typeof raw !== 'object') throw new RtError('invalid_value', param, `${param} must be an object.`);
  const it = raw as Obj;
  const type = it.type ?? 'message';
  const id = typeof it.id === 'string' && it.id ? it.id : rid('item');
  if (type === 'message') {
    const role = it.role;
    if (role !== 'user' && role !== 'system' && role !== 'assistant') throw new RtError('invalid_value', `${param}.role`, 'role must be user, system or assistant.');
    if (!Array.isArray(it.content)) throw new RtError('invalid_value', `${param}.content`, 'content must be a list of parts.');
    const content = (it.content as Obj[]).map((c, i) => {
      const t = c?.type;
      if (t === 'input_text' || t === 'text' || t === 'output_text') {
        if (typeof c.text !== 'string') throw new RtError('invalid_value', `${param}.content[${i}].text`, 'text must be a string.');
        return { type: t, text: c.text };
      }
      if (t === 'input_audio' || t === 'audio' || t === 'output_audio') throw new RtError('unsupported_parameter', `${param}.content[${i}].type`, 'Audio content is not available here yet; send text.');
      throw new RtError('invalid_value', `${param}.content[${i}].type`, `content type ${JSON.stringify(t)} is not supported; use input_text.`);
    });
    return { id, object: 'realtime.item', type: 'message', role, status: 'completed', content };
  }
  if (type === 'function_call') {
    if (typeof it.call_id !== 'string' || typeof it.name !== 'string') throw new RtError('invalid_value', param, 'a function_call item needs call_id and name.');
    return { id, object: 'realtime.item', type, status: 'completed', call_id: it.call_id, name: it.name, arguments: typeof it.arguments === 'string' ? it.arguments : '' };
  }
  if (type === 'function_call_output') {
    if (typeof it.call_id !== 'string' || typeof it.output !== 'string') throw new RtError('invalid_value', param, 'a function_call_output item needs call_id and output (a string).');
    return { id, object: 'realtime.item', type, status: 'completed', call_id: it.call_id, output: it.output };
  }
  throw new RtError('invalid_value', `${param}.type`, `item type ${JSON.stringify(type)} is not supported.`);
}

/** The conversation as chat messages (function calls as assistant tool calls, their outputs as tool messages). */
function chatMessages(instructions: string, items: Item[]): Obj[] {
  const out: Obj[] = [];
  if (instructions) out.push({ role: 'system', content: instructions });
  for (const it of items) {
    if (it.type === 'message') {
      out.push({ role: it.role, content: (it.content ?? []).map((c) => c.text as string).join('') });
    } else if (it.type === 'function_call') {
      const call = { id: it.call_id, type: 'function', function: { name: it.name, arguments: it.arguments ?? '' } };
      const last = out[out.length - 1];
      if (last?.role === 'assistant' && Array.isArray(last.tool_calls)) (last.tool_calls as Obj[]).push(call);
      else out.push({ role: 'assistant', content: null, tool_calls: [call] });
    } else if (it.type === 'function_call_output') {
      out.push({ role: 'tool', tool_call_id: it.call_id, content: it.output });
    }
  }
  return out;
}

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

interface Active {
  id: string;
  call: UpstreamCall | null;
  cancelled: boolean;
  dropped: boolean;
}

class Realtime implements SessionHandler {
  private session: Obj;
  private readonly items: Item[] = [];
  private seq = 0;
  private ended = false;
  private active: Active | null = null;
  /** The response under way: a close or a shutdown waits for it to be billed. */
  private work: Promise<void> = Promise.resolve();

  constructor(private readonly s: Services, private readonly socket: SessionSocket, private readonly model: ModelConfig,
    private readonly charge: Charge, private readonly headers: Record<string, string>, session: Obj) {
    this.session = session;
  }

  opened(): void {
    void this.emit({ type: 'session.created', session: this.session });
  }

  private emit(ev: Obj): Promise<void> {
    return this.socket.send(JSON.stringify({ event_id: rid('event'), ...ev }));
  }

  private error(code: string | null, message: string, param: string | null = null, clientEventId: unknown = null, type = 'invalid_request_error'): Promise<void> {
    return this.emit({ type: 'error', error: { type, code, message, param, event_id: typeof clientEventId === 'string' ? clientEventId : null } });
  }

  async message(data: Buffer, isBinary: boolean): Promise<void> {
    if (this.ended) return;
    let m: Obj;
    try {
      if (isBinary) throw new Error('binary');
      const v = JSON.parse(data.toString('utf8')) as unknown;
      if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
      m = v as Obj;
    } catch {
      return this.error('invalid_json', 'The event is not a JSON object (send JSON text frames); the session goes on.');
    }
    const type = typeof m.type === 'string' ? (CLIENT_ALIASES[m.type] ?? m.type) : null;
    try {
      switch (type) {
        case 'session.update': return await this.update(m);
        case 'conversation.item.create': return await this.createItem(m);
        case 'conversation.item.delete': return await this.deleteItem(m);
        case 'conversation.item.retrieve': return await this.retrieveItem(m);
        case 'response.create': return await this.createResponse(m);
        case 'response.cancel': return await this.cancel(m);
        case 'input_audio_buffer.append': case 'input_audio_buffer.commit': case 'input_audio_buffer.clear':
        case 'conversation.item.truncate': case 'output_audio_buffer.clear':
          throw new RtError('unsupported_event', 'type', `${type}: audio turns are not available on this gateway yet; send text with conversation.item.create.`);
        case null: throw new RtError('invalid_event', 'type', 'The event has no `type`.');
        default: throw new RtError('invalid_event', 'type', `Unknown event type ${JSON.stringify(type).slice(0, 60)}.`);
      }
    } catch (e) {
      if (e instanceof RtError) return this.error(e.code, e.message, e.param, m.event_id, e.type);
      throw e;
    }
  }

  private async update(m: Obj): Promise<void> {
    const u = m.session;
    if (!u || typeof u !== 'object') throw new RtError('invalid_value', 'session', '`session` must be an object.');
    // All or nothing: an error leaves the session as it was.
    this.session = updatedSession(this.session, u as Obj, this.model);
    await this.emit({ type: 'session.updated', session: this.session });
  }

  private async createItem(m: Obj): Promise<void> {
    const item = clientItem(m.item, 'item');
    const prev = typeof m.previous_item_id === 'string' ? m.previous_item_id : undefined;
    let at = this.items.length;
    if (prev !== undefined && prev !== 'root') {
      const i = this.items.findIndex((x) => x.id === prev);
      if (i < 0) throw new RtError('invalid_value', 'previous_item_id', `No item ${prev.slice(0, 60)} in the conversation.`);
      at = i + 1;
    } else if (prev === 'root') at = 0;
    if (this.items.some((x) => x.id === item.id)) throw new RtError('invalid_value', 'item.id', `An item ${item.id.slice(0, 60)} already exists.`);
    this.items.splice(at, 0, item);
    await this.emit({ type: 'conversation.item.created', previous_item_id: at > 0 ? this.items[at - 1]!.id : null, item });
  }

  private async deleteItem(m: Obj): Promise<void> {
    const i = this.items.findIndex((x) => x.id === m.item_id);
    if (i < 0) throw new RtError('invalid_value', 'item_id', 'No such item in the conversation.');
    this.items.splice(i, 1);
    await this.emit({ type: 'conversation.item.deleted', item_id: m.item_id });
  }

  private async retrieveItem(m: Obj): Promise<void> {
    const it = this.items.find((x) => x.id === m.item_id);
    if (!it) throw new RtError('invalid_value', 'item_id', 'No such item in the conversation.');
    await this.emit({ type: 'conversation.item.retrieved', item: it });
  }

  private async cancel(m: Obj): Promise<void> {
    const a = this.active;
    if (!a || (typeof m.response_id === 'string' && m.response_id !== a.id)) {
      throw new RtError('response_cancel_not_active', null, 'There is no response in progress to cancel.');
    }
    a.cancelled = true;
    a.call?.abort();
  }

  /** Checks the request now (errors answer at once); the response itself runs beside the message loop, so a cancel can reach it. */
  private async createResponse(m: Obj): Promise<void> {
    if (this.active) throw new RtError('conversation_already_has_active_response', null, `Response ${this.active.id} is still in progress; wait for its response.done or cancel it.`);
    const r = (m.response ?? {}) as Obj;
    if (typeof r !== 'object') throw new RtError('invalid_value', 'response', '`response` must be an object.');
    const mods = r.output_modalities ?? r.modalities;
    if (mods !== undefined && !(Array.isArray(mods) && mods.every((x) => x === 'text' || x === 'audio'))) throw new RtError('invalid_value', 'response.output_modalities', 'output_modalities must be ["text"] or ["audio"].');
    if (Array.isArray(mods) && mods.includes('audio') && !mods.includes('text')) throw new RtError('unsupported_parameter', 'response.output_modalities', 'Audio output is not available here yet; use ["text"].');
    const maxOut = r.max_output_tokens ?? r.max_response_output_tokens ?? this.session.max_output_tokens;
    const limit = checkMaxOutput(maxOut, 'response.max_output_tokens', this.model);
    const instructions = typeof r.instructions === 'string' ? r.instructions : this.session.instructions as string;
    const tools = chatTools(r.tools ?? this.session.tools);
    const toolChoice = tools ? chatToolChoice(r.tool_choice ?? this.session.tool_choice) : undefined;
    const outOfBand = r.conversation === 'none';
    const extra = Array.isArray(r.input) ? (r.input as unknown[]).map((x, i) => clientItem(x, `response.input[${i}]`)) : [];
    const items = outOfBand ? extra : [...this.items, ...extra];
    const messages = chatMessages(instructions, items);
    const body: Obj = { model: this.model.upstreamModel, messages, stream: true, stream_options: { include_usage: true } };
    if (limit !== 'inf') body.max_tokens = limit;
    if (tools) { body.tools = tools; if (toolChoice !== undefined) body.tool_choice = toolChoice; }
    if (typeof r.temperature === 'number') body.temperature = r.temperature;
    else if (typeof this.session.temperature === 'number') body.temperature = this.session.temperature;
    const a: Active = { id: rid('resp'), call: null, cancelled: false, dropped: false };
    this.active = a;
    const run = this.work.then(() => this.respond(a, body, limit === 'inf' ? this.model.maxOutputTokens : limit, messages, outOfBand, r.metadata ?? null));
    this.work = run.catch((e) => { log('error', 'realtime response failed', { session: this.socket.id, error: String((e as Error)?.stack ?? e) }); });
  }

  private response(a: Active, status: string, output: Item[], usage: Obj | null, metadata: unknown, details: Obj | null = null): Obj {
    return { object: 'realtime.response', id: a.id, status, status_details: details, output, conversation_id: this.socket.id,
      output_modalities: ['text'], max_output_tokens: this.session.max_output_tokens, metadata, usage };
  }

  /**
   * One response: hold its worst case (the prompt's bytes as tokens, the most output), stream the
   * chat model's reply as realtime events, and settle what the upstream reported (what was produced, if it broke).
   */
  private async respond(a: Active, body: Obj, maxOut: number, messages: Obj[], outOfBand: boolean, metadata: unknown): Promise<void> {
    const payload = Buffer.from(JSON.stringify(body));
    const worst = price(this.model.prices, { inputTokens: payload.length, outputTokens: maxOut, characters: 0, audioInMs: 0, audioOutMs: 0 });
    try {
      // Each response is a billed unit: balance and ceiling checked again, and it takes a token of the key's rpm.
      await this.charge.extend(worst, { countsAsRequest: true });
    } catch (e) {
      this.active = null;
      if (!(e instanceof GatewayError)) throw e;
      await this.emit({ type: 'response.done', response: this.response(a, 'failed', [], null, metadata, { type: 'failed', error: { type: e.type, code: e.code } }) });
      await this.error(e.code, e.message, null, null, e.type);
      this.end(POLICY, e.code);
      return;
    }
    const seq = ++this.seq;
    await this.emit({ type: 'response.created', response: this.response(a, 'in_progress', [], null, metadata) });
    const text: Item = { id: rid('item'), object: 'realtime.item', type: 'message', role: 'assistant', status: 'in_progress', content: [] };
    const calls = new Map<number, Item>();
    const events: Obj[] = [];
    let textStarted = false;
    let textSoFar = '';
    let outputIndex = 0;
    const order: Item[] = [];
    const startText = () => {
      if (textStarted) return;
      textStarted = true;
      order.push(text);
      events.push({ type: 'response.output_item.added', response_id: a.id, output_index: outputIndex++, item: { ...text, content: [] } });
      events.push({ type: 'response.content_part.added', response_id: a.id, item_id: text.id, output_index: order.indexOf(text), content_index: 0, part: { type: 'text', text: '' } });
    };
    const meter = new SseMeter({ stripUsageChunk: true, stripChunkUsage: false, promptTokens: () => chatPromptTokens(messages),
      translate: {
        start: () => '', done: () => '',
        chunk: (obj) => {
          for (const c of (obj.choices as Obj[] | undefined) ?? []) {
            const d = (c.delta ?? {}) as Obj;
            if (typeof d.content === 'string' && d.content.length > 0) {
              startText();
              textSoFar += d.content;
              events.push({ type: 'response.output_text.delta', response_id: a.id, item_id: text.id, output_index: order.indexOf(text), content_index: 0, delta: d.content });
            }
            for (const tc of (d.tool_calls as Obj[] | undefined) ?? []) {
              const idx = typeof tc.index === 'number' ? tc.index : 0;
              const fn = (tc.function ?? {}) as Obj;
              let call = calls.get(idx);
              if (!call) {
                call = { id: rid('item'), object: 'realtime.item', type: 'function_call', status: 'in_progress', call_id: typeof tc.id === 'string' ? tc.id : rid('call'), name: typeof fn.name === 'string' ? fn.name : '', arguments: '' };
                calls.set(idx, call);
                order.push(call);
                events.push({ type: 'response.output_item.added', response_id: a.id, output_index: outputIndex++, item: { ...call } });
              }
              if (typeof fn.arguments === 'string' && fn.arguments.length > 0) {
                call.arguments += fn.arguments;
                events.push({ type: 'response.function_call_arguments.delta', response_id: a.id, item_id: call.id, output_index: order.indexOf(call), call_id: call.call_id, delta: fn.arguments });
              }
            }
          }
          return '';
        },
      } });
    let failure: GatewayError | null = null;
    try {
      const call = this.s.upstreams.call(this.model.upstream, 'POST', '/v1/chat/completions', { ...this.headers, 'content-type': 'application/json', accept: 'text/event-stream' },
        payload, `${this.socket.id}-${seq}`);
      a.call = call;
      if (a.cancelled || a.dropped) call.abort();
      const res = await call.response;
      if (res.statusCode !== 200) {
        failure = await alpha.upstreamError(res, `${this.socket.id}-${seq}`);
      } else {
        for await (const chunk of res) {
          meter.onData(chunk as Buffer);
          for (const ev of events.splice(0)) await this.emit(ev);
          if (a.cancelled || a.dropped) { call.abort(); break; }
        }
      }
    } catch (e) {
      if (!a.cancelled && !a.dropped) failure = e instanceof GatewayError ? e : new GatewayError({ status: 502, code: 'upstream_error', message: 'The model upstream failed mid-response.' });
    }
    // What was produced is billed, whatever became of the socket; nothing produced, nothing billed.
    const complete = meter.done && !a.cancelled && !a.dropped && failure === null;
    const u = meter.produced || complete ? meter.usage() : { ...meter.usage(), inputTokens: 0, outputTokens: 0, reasoningTokens: 0 };
    await this.charge.settle(u, { seq, final: false, covers: worst, extra: a.dropped ? { client_dropped: true } : {} });
    this.active = null;
    // The output items, done; assistant output joins the conversation (unless out of band).
    const status = a.cancelled ? 'cancelled' : failure ? 'failed' : complete ? 'completed' : 'incomplete';
    if (textStarted) {
      text.status = status === 'completed' ? 'completed' : 'incomplete';
      text.content = [{ type: 'output_text', text: textSoFar }];
      const oi = order.indexOf(text);
      events.push({ type: 'response.output_text.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, text: textSoFar });
      events.push({ type: 'response.content_part.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, part: { type: 'text', text: textSoFar } });
    }
    for (const c of calls.values()) {
      c.status = status === 'completed' ? 'completed' : 'incomplete';
      events.push({ type: 'response.function_call_arguments.done', response_id: a.id, item_id: c.id, output_index: order.indexOf(c), call_id: c.call_id, name: c.name, arguments: c.arguments });
    }
    for (const it of order) {
      events.push({ type: 'response.output_item.done', response_id: a.id, output_index: order.indexOf(it), item: it });
      if (!outOfBand) this.items.push(it);
    }
    const usage = { total_tokens: u.inputTokens + u.outputTokens, input_tokens: u.inputTokens, output_tokens: u.outputTokens,
      input_token_details: { cached_tokens: 0, text_tokens: u.inputTokens, audio_tokens: 0, image_tokens: 0 },
      output_token_details: { text_tokens: u.outputTokens, audio_tokens: 0 } };
    const details = a.cancelled ? { type: 'cancelled', reason: 'client_cancelled' }
      : failure ? { type: 'failed', error: { type: failure.type, code: failure.code, message: failure.message } }
        : complete ? null : { type: 'incomplete', reason: 'upstream_ended' };
    events.push({ type: 'response.done', response: this.response(a, status, order, usage, metadata, details) });
    if (a.dropped) return;
    for (const ev of events.splice(0)) await this.emit(ev);
    if (failure) await this.error(failure.code, failure.message, failure.param, null, failure.type);
  }

  private end(code: number, reason: string): void {
    this.ended = true;
    this.socket.close(code, reason);
  }

  async closed(): Promise<void> {
    this.ended = true;
    // A response under way stops; what it produced is billed; then the slot is freed.
    if (this.active) { this.active.dropped = true; this.active.call?.abort(); }
    await this.work;
    await this.charge.release();
  }

  async shutdown(): Promise<void> {
    this.ended = true;
    // A response under way finishes and is billed, then the client hears 1001 (going away).
    await this.work;
    this.socket.close(GOING_AWAY, 'the gateway is shutting down');
    await this.charge.release();
  }
}

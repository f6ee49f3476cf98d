// WS /alpha/v1/realtime?model=...: OpenAI's realtime protocol (GA events); text and audio turns through transcription, chat and speech models, billed per turn and response.
import type { IncomingMessage } from 'node:http';
import type { Services } from '../../services.js';
import type { ModelConfig } from '../../config.js';
import { GatewayError } from '../../errors.js';
import { Charge } from '../../exchange/charge.js';
import { price } from '../../ledger/pricing.js';
import { nd } from '../../money.js';
import { SseMeter } from '../../meter/sse.js';
import { chatPromptTokens } from '../../meter/tokens.js';
import { base62 } from '../../store/ids.js';
import { log } from '../../observe/log.js';
import type { KeyRecord } from '../../store/keys.js';
import { socketKey, type SessionHandler, type SessionSocket, type SocketRoute, type UpgradeRequest } from '../../server/ws.js';
import { presentedKey } from '../../gate/auth.js';
import type { UpstreamCall } from '../../proxy/upstream.js';
import { alpha } from './family.js';
import { usage, type Usage } from '../../exchange/usage.js';
import type { UnitPrices } from '../../ledger/pricing.js';
import { Vad } from '../../audio/vad.js';
import { int16, wav } from '../../audio/pcm.js';
import { buildForm } from '../../proxy/form.js';
import { OPENAI_VOICES, presetVoice } from '../../resolve/voices.js';
import { openPassthrough } from './realtime-passthrough.js';

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
      // A realtime model whose upstream speaks the protocol itself: relayed, not run as a cascade.
      if (model.passthrough) return openPassthrough(s, req, key!, socket, model, minted);
      const audio = audioModels(s);
      // The session is admitted now (balance, ceiling, rpm, its concurrency slot) with nothing held.
      const charge = await Charge.open(s, { key: key!, id: socket.id, model: { id: model.id, prices: sessionPrices(model, audio) }, reason: 'realtime',
        worst: { inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: 0, audioOutMs: 0 } });
      let session = defaultSession(socket.id, model.id);
      // A session opened with a client secret starts with the configuration the secret was minted with.
      if (minted) {
        try {
          session = updatedSession(session, { ...minted, model: undefined, id: undefined, object: undefined, expires_at: undefined }, model, audioCaps(s, audio));
        } catch (e) {
          await charge.release();
          if (e instanceof RtError) throw new GatewayError({ status: 400, code: 'invalid_value', param: e.param, message: e.message });
          throw e;
        }
      }
      return new Realtime(s, socket, model, charge, req.headers, session, audio);
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

/** The models a session's audio goes through (config `realtime`), where configured. */
export interface AudioModels { stt: ModelConfig | undefined; tts: ModelConfig | undefined }

function audioModels(s: Services): AudioModels {
  const { transcriptionModel, speechModel } = s.config.realtime;
  return { stt: transcriptionModel ? s.models.find(transcriptionModel) : undefined, tts: speechModel ? s.models.find(speechModel) : undefined };
}

/**
 * One price list for a session's units: tokens at the session model's prices; committed input audio
 * at a realtime model's own audio price, else at the transcription model's; synthesized characters
 * at the session model's per_mchar if it has one, else at the speech model's; audio out at the
 * session model's audio_out price (zero unless a realtime model sets one).
 */
function sessionPrices(model: ModelConfig, audio: AudioModels): UnitPrices {
  const p = model.prices;
  return {
    ...p,
    audioInPerMinute: model.kind === 'realtime' ? p.audioInPerMinute : (audio.stt?.prices.audioInPerMinute ?? 0n),
    perMChar: p.perMChar > 0n ? p.perMChar : (audio.tts?.prices.perMChar ?? 0n),
  };
}

/** What a session.update may ask for, given the models configured. */
export interface AudioCaps { audioOut: boolean; transcription: ((name: string) => boolean) | null }

function audioCaps(s: Services, audio: AudioModels): AudioCaps {
  return {
    audioOut: audio.tts !== undefined,
    // A transcription model named by the client must be the one this gateway transcribes with (an alias of it).
    transcription: audio.stt ? (name) => s.models.find(name)?.id === audio.stt!.id : null,
  };
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

/** The GA session a new socket starts with: text out (ask for audio), PCM 24 kHz formats, server VAD on. */
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
export function updatedSession(current: Obj, update: Obj, model: Limits, caps: AudioCaps = { audioOut: false, transcription: null }): Obj {
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
  if (input.transcription !== undefined) next.audio.input.transcription = checkTranscription(input.transcription, u.input_audio_transcription !== undefined ? 'session.input_audio_transcription' : 'session.audio.input.transcription', caps);
  if (input.noise_reduction !== undefined && input.noise_reduction !== null) {
    // Noise reduction would change what is heard: refused rather than ignored.
    throw new RtError('unsupported_parameter', 'session.audio.input.noise_reduction', 'Input noise reduction is not available here; set it to null.');
  }
  if (output.voice !== undefined) {
    if (typeof output.voice !== 'string' || !OPENAI_VOICES.includes(output.voice)) {
      throw new RtError('invalid_value', u.voice !== undefined ? 'session.voice' : 'session.audio.output.voice', `voice must be one of ${OPENAI_VOICES.join(', ')}.`);
    }
    next.audio.output.voice = output.voice;
  }
  if (output.speed !== undefined) {
    if (typeof output.speed !== 'number' || !(output.speed >= 0.25 && output.speed <= 4)) throw new RtError('invalid_value', 'session.audio.output.speed', 'speed must be a number from 0.25 to 4.');
    next.audio.output.speed = output.speed;
  }
  if (u.output_modalities !== undefined) next.output_modalities = checkModalities(u.output_modalities, 'session.output_modalities', caps);
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

/** ["text"] or ["audio"] (audio carries its transcript); audio only where a speech model is configured. */
function checkModalities(m: unknown, param: string, caps: AudioCaps): string[] {
  if (!Array.isArray(m) || m.length === 0 || m.some((x) => x !== 'text' && x !== 'audio')) throw new RtError('invalid_value', param, 'output_modalities must be ["text"] or ["audio"].');
  if (!m.includes('audio')) return ['text'];
  if (!caps.audioOut) throw new RtError('unsupported_parameter', param, 'Audio output needs a speech (tts) model, and this gateway has none configured; use ["text"].');
  return ['audio'];
}

function checkTranscription(t: unknown, param: string, caps: AudioCaps): Obj | null {
  if (t === null) return null;
  if (!t || typeof t !== 'object') throw new RtError('invalid_value', param, `${param} must be an object or null.`);
  const o = t as Obj;
  if (!caps.transcription) throw new RtError('unsupported_parameter', param, 'Input transcription needs a transcription (stt) model, and this gateway has none configured.');
  if (o.model !== undefined && (typeof o.model !== 'string' || !caps.transcription(o.model))) {
    throw new RtError('invalid_value', `${param}.model`, `${String(o.model).slice(0, 60)} is not this gateway's realtime transcription model.`);
  }
  for (const k of ['language', 'prompt'] as const) {
    if (o[k] !== undefined && typeof o[k] !== 'string') throw new RtError('invalid_value', `${param}.${k}`, `${k} must be a string.`);
  }
  return { ...o };
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
      // Text parts, and the transcripts of audio parts (a user's committed turn, an assistant's spoken reply).
      out.push({ role: it.role, content: (it.content ?? []).map((c) => (typeof c.text === 'string' ? c.text : typeof c.transcript === 'string' ? c.transcript : '')).join('') });
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

/** What a response.create may carry (GA names, and the beta's `modalities` and `max_response_output_tokens`, `temperature`). */
const RESPONSE_FIELDS = new Set(['conversation', 'input', 'instructions', 'max_output_tokens', 'max_response_output_tokens', 'metadata', 'output_modalities', 'modalities',
  'audio', 'tool_choice', 'tools', 'temperature', 'voice', 'output_audio_format']);

/** A checked response, built when it runs. */
interface Plan {
  maxOut: number;
  outOfBand: boolean;
  metadata: unknown;
  modalities: string[];
  /** Audio output: the voice (an OpenAI voice name) and speed to speak the reply with. */
  speech: { voice: string; speed: number } | null;
  build(): { body: Obj; messages: Obj[] };
}

interface Active {
  id: string;
  call: UpstreamCall | null;
  cancelled: boolean;
  /** Why it was cancelled: the client asked, or the user started speaking (interrupt_response). */
  cancelReason: 'client_cancelled' | 'turn_detected';
  dropped: boolean;
}

/** Realtime PCM: 16-bit mono at 24 kHz, 48 bytes a millisecond. */
const RATE = 24_000;
const BYTES_PER_MS = 48;
/** The most input audio a session buffers uncommitted (10 minutes). */
const MAX_INPUT_MS = 10 * 60_000;
/** The least audio a commit takes (as the OpenAI protocol has it). */
const MIN_COMMIT_MS = 100;
/** The most transcription JSON read from an upstream. */
const MAX_TRANSCRIPT_BYTES = 1 << 20;

/** Input PCM since the last commit or clear, addressed by absolute sample positions since the session began. */
class InputAudio {
  private chunks: Buffer[] = [];
  private bytes = 0;
  /** Absolute sample position of the first buffered sample. */
  base = 0;

  get end(): number { return this.base + this.bytes / 2; }

  append(b: Buffer): void { this.chunks.push(b); this.bytes += b.length; }

  /** The samples [from, to) (clamped to what is buffered), as bytes. */
  slice(from: number, to: number): Buffer {
    const all = this.whole();
    return all.subarray(Math.max(0, from - this.base) * 2, Math.max(0, Math.min(to, this.end) - this.base) * 2);
  }

  /** Forgets everything before `at`. */
  dropBefore(at: number): void {
    if (at <= this.base) return;
    const all = this.whole();
    const cut = Math.min(all.length, (at - this.base) * 2);
    const rest = Buffer.from(all.subarray(cut));
    this.chunks = rest.length > 0 ? [rest] : [];
    this.bytes = rest.length;
    this.base += cut / 2;
  }

  clear(): void { this.dropBefore(this.end); }

  private whole(): Buffer {
    if (this.chunks.length > 1) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0] ?? Buffer.alloc(0);
  }
}

class Realtime implements SessionHandler {
  private session: Obj;
  private readonly items: Item[] = [];
  private seq = 0;
  private ended = false;
  private active: Active | null = null;
  /** The response or transcription under way: a close or a shutdown waits for it to be billed. */
  private work: Promise<void> = Promise.resolve();
  private readonly input = new InputAudio();
  /** Server VAD over the input (null when turn_detection is null), and where its sample count starts. */
  private vad: Vad | null = null;
  private vadOrigin = 0;
  /** The turn VAD heard start: its item id and first sample (prefix padding included). */
  private turn: { itemId: string; start: number } | null = null;
  private readonly caps: AudioCaps;

  constructor(private readonly s: Services, private readonly socket: SessionSocket, private readonly model: ModelConfig,
    private readonly charge: Charge, private readonly headers: Record<string, string>, session: Obj, private readonly audio: AudioModels) {
    this.session = session;
    this.caps = audioCaps(s, audio);
    this.resetVad();
  }

  private get turnDetection(): Obj | null {
    return ((this.session.audio as { input: Obj }).input.turn_detection as Obj | null) ?? null;
  }

  /** A fresh detector from the session's turn_detection, counting from the buffer's end; no turn open. */
  private resetVad(): void {
    const td = this.turnDetection;
    this.turn = null;
    this.vadOrigin = this.input.end;
    this.vad = td ? new Vad({ threshold: Number(td.threshold ?? 0.5), prefixPaddingMs: Number(td.prefix_padding_ms ?? 300), silenceDurationMs: Number(td.silence_duration_ms ?? 500) }, RATE) : null;
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
        case 'input_audio_buffer.append': return await this.append(m);
        case 'input_audio_buffer.commit': return await this.commit();
        case 'input_audio_buffer.clear': return await this.clearInput();
        case 'conversation.item.truncate':
          throw new RtError('unsupported_event', 'type', 'conversation.item.truncate is not available on this gateway: a spoken reply cannot be cut back to what was played.');
        case 'output_audio_buffer.clear':
          throw new RtError('unsupported_event', 'type', 'output_audio_buffer.clear is for WebRTC and SIP sessions; on a WebSocket, stop playing the audio you have.');
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
    const before = JSON.stringify(this.turnDetection);
    this.session = updatedSession(this.session, u as Obj, this.model, this.caps);
    if (JSON.stringify(this.turnDetection) !== before) this.resetVad();
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

  private ms(sample: number): number { return Math.round((sample * 1000) / RATE); }

  /** input_audio_buffer.append: base64 PCM16 at 24 kHz; server VAD (when on) starts and ends turns as it hears them. */
  private async append(m: Obj): Promise<void> {
    if (!this.audio.stt) throw new RtError('unsupported_event', 'type', 'Audio input needs a transcription (stt) model, and this gateway has none configured; send text with conversation.item.create.');
    if (typeof m.audio !== 'string') throw new RtError('invalid_value', 'audio', '`audio` must be base64-encoded 16-bit PCM at 24 kHz.');
    const bytes = Buffer.from(m.audio, 'base64');
    if (bytes.length % 2 !== 0) throw new RtError('invalid_value', 'audio', '`audio` must be whole 16-bit samples (an even number of bytes).');
    if ((this.input.end - this.input.base) / (RATE / 1000) + bytes.length / BYTES_PER_MS > MAX_INPUT_MS) {
      throw new RtError('input_audio_buffer_too_large', 'audio', `The input audio buffer holds at most ${MAX_INPUT_MS / 60_000} minutes; commit or clear it.`);
    }
    this.input.append(bytes);
    if (!this.vad) return;
    const td = this.turnDetection!;
    for (const ev of this.vad.push(int16(bytes))) {
      const at = this.vadOrigin + ev.at;
      if (ev.type === 'start') {
        const start = Math.max(this.input.base, at - Math.round((Number(td.prefix_padding_ms ?? 300) * RATE) / 1000));
        this.turn = { itemId: rid('item'), start };
        await this.emit({ type: 'input_audio_buffer.speech_started', audio_start_ms: this.ms(start), item_id: this.turn.itemId });
        // The user talks over a reply: it stops (billed for what it produced).
        if (td.interrupt_response !== false && this.active) {
          this.active.cancelled = true;
          this.active.cancelReason = 'turn_detected';
          this.active.call?.abort();
        }
      } else if (this.turn) {
        const turn = this.turn;
        this.turn = null;
        await this.emit({ type: 'input_audio_buffer.speech_stopped', audio_end_ms: this.ms(at), item_id: turn.itemId });
        await this.commitTurn(turn.start, at, turn.itemId, td.create_response !== false);
      }
    }
    // Between turns only the prefix padding is kept.
    if (!this.turn) this.input.dropBefore(this.input.end - Math.round((Number(td.prefix_padding_ms ?? 300) * RATE) / 1000));
  }

  /** input_audio_buffer.commit: the whole buffer becomes a user turn (no response unless VAD would make one). */
  private async commit(): Promise<void> {
    if (!this.audio.stt) throw new RtError('unsupported_event', 'type', 'Audio input needs a transcription (stt) model, and this gateway has none configured.');
    const itemId = this.turn?.itemId ?? rid('item');
    const end = this.input.end;
    const ms = this.ms(end - this.input.base);
    if (ms < MIN_COMMIT_MS) {
      throw new RtError('input_audio_buffer_commit_empty', null, `Error committing input audio buffer: buffer too small. Expected at least ${MIN_COMMIT_MS}ms of audio, but buffer only has ${ms}ms of audio.`);
    }
    await this.commitTurn(this.input.base, end, itemId, false);
    this.resetVad();
  }

  private async clearInput(): Promise<void> {
    this.input.clear();
    this.resetVad();
    await this.emit({ type: 'input_audio_buffer.cleared' });
  }

  /**
   * The audio [from, to) becomes a user message item (its transcript to come); the buffer keeps what
   * follows. The transcription runs in turn with responses, billed as its own part; then, if asked,
   * a response to it.
   */
  private async commitTurn(from: number, to: number, itemId: string, respond: boolean): Promise<void> {
    const pcm = Buffer.from(this.input.slice(from, to));
    this.input.dropBefore(to);
    const previous = this.items.length > 0 ? this.items[this.items.length - 1]!.id : null;
    const item: Item = { id: itemId, object: 'realtime.item', type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_audio', transcript: null }] };
    this.items.push(item);
    await this.emit({ type: 'input_audio_buffer.committed', previous_item_id: previous, item_id: itemId });
    await this.emit({ type: 'conversation.item.added', previous_item_id: previous, item });
    const run = this.work.then(async () => {
      const heard = await this.transcribe(item, pcm);
      if (!heard || this.ended) return;
      await this.emit({ type: 'conversation.item.done', previous_item_id: previous, item });
      // A response the client already asked for covers this turn.
      if (!respond || this.active) return;
      try {
        this.startResponse({});
      } catch (e) {
        if (!(e instanceof RtError)) throw e;
        await this.error(e.code, e.message, e.param, null, e.type);
      }
    });
    this.work = run.catch((e) => { log('error', 'realtime transcription failed', { session: this.socket.id, error: String((e as Error)?.stack ?? e) }); });
  }

  /**
   * Transcribes a committed turn with the transcription upstream (a WAV of it), billed by its
   * duration as its own part of the session. Failed: nothing billed, a `...transcription.failed` event.
   */
  private async transcribe(item: Item, pcm: Buffer): Promise<boolean> {
    const stt = this.audio.stt!;
    const u: Usage = usage({ audioInMs: Math.floor(pcm.length / BYTES_PER_MS), basis: 'exact' });
    const cost = this.charge.cost(u);
    const failed = (e: GatewayError) => this.emit({ type: 'conversation.item.input_audio_transcription.failed', item_id: item.id, content_index: 0,
      error: { type: e.type, code: e.code, message: e.message, param: e.param ?? null } });
    try {
      await this.charge.extend(cost);
    } catch (e) {
      if (!(e instanceof GatewayError)) throw e;
      await failed(e);
      await this.error(e.code, e.message, null, null, e.type);
      this.end(POLICY, e.code);
      return false;
    }
    const seq = ++this.seq;
    const t = ((this.session.audio as { input: Obj }).input.transcription as Obj | null) ?? {};
    const form = buildForm([
      { name: 'model', value: stt.upstreamModel }, { name: 'response_format', value: 'json' },
      ...(typeof t.language === 'string' ? [{ name: 'language', value: t.language }] : []),
      ...(typeof t.prompt === 'string' ? [{ name: 'prompt', value: t.prompt }] : []),
      { name: 'file', filename: 'turn.wav', contentType: 'audio/wav', data: wav(pcm, RATE) },
    ]);
    let text: string | null = null;
    let failure: GatewayError | null = null;
    try {
      const call = this.s.upstreams.call(stt.upstream, 'POST', '/v1/audio/transcriptions', { ...this.headers, 'content-type': form.contentType, accept: 'application/json' },
        form.body, `${this.socket.id}-${seq}`);
      const res = await call.response;
      if (res.statusCode !== 200) {
        failure = await alpha.upstreamError(res, `${this.socket.id}-${seq}`);
      } else {
        const parts: Buffer[] = [];
        let size = 0;
        for await (const c of res) {
          size += (c as Buffer).length;
          if (size > MAX_TRANSCRIPT_BYTES) { call.abort(); break; }
          parts.push(c as Buffer);
        }
        const j = JSON.parse(Buffer.concat(parts).toString('utf8')) as Obj;
        if (typeof j.text !== 'string') throw new Error('no text');
        text = j.text;
      }
    } catch (e) {
      failure = e instanceof GatewayError ? e : new GatewayError({ status: 502, code: 'upstream_error', message: 'The transcription upstream failed or answered without a transcript.' });
    }
    if (text === null) {
      await this.charge.settle(usage({ basis: 'exact' }), { seq, final: false, covers: cost });
      await failed(failure ?? new GatewayError({ status: 502, code: 'upstream_error', message: 'The transcription upstream failed.' }));
      return false;
    }
    await this.charge.settle(u, { seq, final: false, covers: cost, extra: { transcription: stt.id } });
    (item.content![0] as Obj).transcript = text;
    await this.emit({ type: 'conversation.item.input_audio_transcription.completed', item_id: item.id, content_index: 0, transcript: text,
      usage: { type: 'duration', seconds: u.audioInMs / 1000 } });
    return true;
  }

  /** Checks the request now (errors answer at once); the response itself runs beside the message loop, so a cancel can reach it. */
  private async createResponse(m: Obj): Promise<void> {
    if (this.active) throw new RtError('conversation_already_has_active_response', null, `Response ${this.active.id} is still in progress; wait for its response.done or cancel it.`);
    const r = (m.response ?? {}) as Obj;
    if (typeof r !== 'object') throw new RtError('invalid_value', 'response', '`response` must be an object.');
    this.startResponse(r);
  }

  /**
   * Checks a response's parameters and queues it behind the session's work (a transcription, an
   * earlier response); the conversation it answers is read when it runs, so a turn still being
   * transcribed is in it.
   */
  private startResponse(r: Obj): void {
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
    const modalities = mods === undefined ? this.session.output_modalities as string[] : checkModalities(mods, 'response.output_modalities', this.caps);
    const spoken = modalities.includes('audio');
    const out = (r.audio as { output?: Obj } | undefined)?.output ?? {};
    const voice = out.voice ?? r.voice ?? (this.session.audio as { output: Obj }).output.voice;
    if (typeof voice !== 'string' || !OPENAI_VOICES.includes(voice)) throw new RtError('invalid_value', 'response.audio.output.voice', `voice must be one of ${OPENAI_VOICES.join(', ')}.`);
    if (out.format !== undefined) checkFormat(out.format, 'response.audio.output.format');
    if (r.output_audio_format !== undefined) checkFormat(r.output_audio_format, 'response.output_audio_format');
    const maxOut = r.max_output_tokens ?? r.max_response_output_tokens ?? this.session.max_output_tokens;
    const limit = checkMaxOutput(maxOut, 'response.max_output_tokens', this.model);
    const instructions = typeof r.instructions === 'string' ? r.instructions : this.session.instructions as string;
    const tools = chatTools(r.tools ?? this.session.tools);
    const toolChoice = tools ? chatToolChoice(r.tool_choice ?? this.session.tool_choice) : undefined;
    const outOfBand = r.conversation === 'none';
    const extra = Array.isArray(r.input) ? (r.input as unknown[]).map((x, i) => clientItem(x, `response.input[${i}]`)) : [];
    const temperature = typeof r.temperature === 'number' ? r.temperature : typeof this.session.temperature === 'number' ? this.session.temperature : undefined;
    const a: Active = { id: rid('resp'), call: null, cancelled: false, cancelReason: 'client_cancelled', dropped: false };
    this.active = a;
    const plan: Plan = {
      maxOut: limit === 'inf' ? this.model.maxOutputTokens : limit, outOfBand, metadata: r.metadata ?? null, modalities,
      speech: spoken ? { voice, speed: (this.session.audio as { output: Obj }).output.speed as number ?? 1 } : null,
      build: () => {
        const messages = chatMessages(instructions, outOfBand ? extra : [...this.items, ...extra]);
        const body: Obj = { model: this.model.upstreamModel, messages, stream: true, stream_options: { include_usage: true } };
        if (limit !== 'inf') body.max_tokens = limit;
        if (tools) { body.tools = tools; if (toolChoice !== undefined) body.tool_choice = toolChoice; }
        if (temperature !== undefined) body.temperature = temperature;
        return { body, messages };
      },
    };
    const run = this.work.then(() => this.respond(a, plan));
    this.work = run.catch((e) => { log('error', 'realtime response failed', { session: this.socket.id, error: String((e as Error)?.stack ?? e) }); });
  }

  private response(a: Active, plan: Plan, status: string, output: Item[], usage: Obj | null, details: Obj | null = null): Obj {
    return { object: 'realtime.response', id: a.id, status, status_details: details, output, conversation_id: this.socket.id,
      output_modalities: plan.modalities, max_output_tokens: this.session.max_output_tokens, metadata: plan.metadata, usage };
  }

  /**
   * One response: hold its worst case (the prompt's bytes as tokens, the most output), stream the
   * chat model's reply as realtime events, speak it with the speech upstream when audio is asked
   * for (its characters held before the call), and settle what was used as one part: the tokens the
   * upstream reported (what was produced, if it broke), and the characters sent for synthesis.
   */
  private async respond(a: Active, plan: Plan): Promise<void> {
    this.active = a;
    const { body, messages } = plan.build();
    const payload = Buffer.from(JSON.stringify(body));
    const worst = price(this.charge.prices, { inputTokens: payload.length, outputTokens: plan.maxOut, characters: 0, audioInMs: 0, audioOutMs: 0 });
    try {
      // Each response is a billed unit: balance and ceiling checked again, and it takes a token of the key's rpm.
      await this.charge.extend(worst, { countsAsRequest: true });
    } catch (e) {
      this.active = null;
      if (!(e instanceof GatewayError)) throw e;
      await this.emit({ type: 'response.done', response: this.response(a, plan, 'failed', [], null, { type: 'failed', error: { type: e.type, code: e.code } }) });
      await this.error(e.code, e.message, null, null, e.type);
      this.end(POLICY, e.code);
      return;
    }
    const seq = ++this.seq;
    const spoken = plan.speech !== null;
    await this.emit({ type: 'response.created', response: this.response(a, plan, 'in_progress', [], null) });
    const text: Item = { id: rid('item'), object: 'realtime.item', type: 'message', role: 'assistant', status: 'in_progress', content: [] };
    const calls = new Map<number, Item>();
    const events: Obj[] = [];
    let textStarted = false;
    let textSoFar = '';
    let outputIndex = 0;
    const order: Item[] = [];
    // Audio output carries the text as its transcript.
    const deltaType = spoken ? 'response.output_audio_transcript.delta' : 'response.output_text.delta';
    const emptyPart = spoken ? { type: 'audio', transcript: '' } : { type: 'text', text: '' };
    const startText = () => {
      if (textStarted) return;
      textStarted = true;
      order.push(text);
      events.push({ type: 'response.output_item.added', response_id: a.id, output_index: outputIndex++, item: { ...text, content: [] } });
      events.push({ type: 'response.content_part.added', response_id: a.id, item_id: text.id, output_index: order.indexOf(text), content_index: 0, part: emptyPart });
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
              events.push({ type: deltaType, response_id: a.id, item_id: text.id, output_index: order.indexOf(text), content_index: 0, delta: d.content });
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
      const { call, res, failed } = await this.callFor(a, this.model.upstream, '/v1/chat/completions', 'text/event-stream', payload, `${this.socket.id}-${seq}`);
      failure = failed;
      if (res) {
        for await (const chunk of res) {
          meter.onData(chunk as Buffer);
          for (const ev of events.splice(0)) await this.emit(ev);
          if (a.cancelled || a.dropped) { call.abort(); break; }
        }
      }
    } catch (e) {
      if (!a.cancelled && !a.dropped) failure = e instanceof GatewayError ? e : new GatewayError({ status: 502, code: 'upstream_error', message: 'The model upstream failed mid-response.' });
    }
    const textDone = meter.done && !a.cancelled && !a.dropped && failure === null;
    // The reply spoken: its characters held, then synthesized and streamed as audio deltas.
    let speech: { characters: number; audioOutMs: number; held: bigint } = { characters: 0, audioOutMs: 0, held: 0n };
    if (textDone && plan.speech && textSoFar.length > 0) {
      const r = await this.speak(a, plan.speech, text, order.indexOf(text), textSoFar, seq);
      speech = r;
      if (r.failure) failure = r.failure;
    }
    // What was produced is billed, whatever became of the socket; nothing produced, nothing billed.
    const complete = textDone && failure === null && !a.cancelled && !a.dropped;
    const m = meter.produced || textDone ? meter.usage() : { ...meter.usage(), inputTokens: 0, outputTokens: 0, reasoningTokens: 0 };
    const u: Usage = { ...m, characters: speech.characters, audioOutMs: speech.audioOutMs };
    await this.charge.settle(u, { seq, final: false, covers: nd(worst + speech.held), extra: a.dropped ? { client_dropped: true } : {} });
    this.active = null;
    // The output items, done; assistant output joins the conversation (unless out of band).
    const status = a.cancelled ? 'cancelled' : failure ? 'failed' : complete ? 'completed' : 'incomplete';
    if (textStarted) {
      text.status = status === 'completed' ? 'completed' : 'incomplete';
      const oi = order.indexOf(text);
      if (spoken) {
        text.content = [{ type: 'output_audio', transcript: textSoFar }];
        events.push({ type: 'response.output_audio_transcript.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, transcript: textSoFar });
        events.push({ type: 'response.content_part.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, part: { type: 'audio', transcript: textSoFar } });
      } else {
        text.content = [{ type: 'output_text', text: textSoFar }];
        events.push({ type: 'response.output_text.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, text: textSoFar });
        events.push({ type: 'response.content_part.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, part: { type: 'text', text: textSoFar } });
      }
    }
    for (const c of calls.values()) {
      c.status = status === 'completed' ? 'completed' : 'incomplete';
      events.push({ type: 'response.function_call_arguments.done', response_id: a.id, item_id: c.id, output_index: order.indexOf(c), call_id: c.call_id, name: c.name, arguments: c.arguments });
    }
    for (const it of order) {
      events.push({ type: 'response.output_item.done', response_id: a.id, output_index: order.indexOf(it), item: it });
      if (!plan.outOfBand) this.items.push(it);
    }
    const usageOut = { total_tokens: u.inputTokens + u.outputTokens, input_tokens: u.inputTokens, output_tokens: u.outputTokens,
      input_token_details: { cached_tokens: 0, text_tokens: u.inputTokens, audio_tokens: 0, image_tokens: 0 },
      output_token_details: { text_tokens: u.outputTokens, audio_tokens: 0 } };
    const details = a.cancelled ? { type: 'cancelled', reason: a.cancelReason }
      : failure ? { type: 'failed', error: { type: failure.type, code: failure.code, message: failure.message } }
        : complete ? null : { type: 'incomplete', reason: 'upstream_ended' };
    events.push({ type: 'response.done', response: this.response(a, plan, status, order, usageOut, details) });
    if (a.dropped) return;
    for (const ev of events.splice(0)) await this.emit(ev);
    if (failure) await this.error(failure.code, failure.message, failure.param, null, failure.type);
  }

  /**
   * POSTs JSON to an upstream for response `a` (a cancel or a dropped socket aborts it): its 200 reply
   * to read, or the upstream's refusal in the family's terms.
   */
  private async callFor(a: Active, upstream: string, path: string, accept: string, body: Buffer, requestId: string):
    Promise<{ call: UpstreamCall; res: IncomingMessage | null; failed: GatewayError | null }> {
    const call = this.s.upstreams.call(upstream, 'POST', path, { ...this.headers, 'content-type': 'application/json', accept }, body, requestId);
    a.call = call;
    if (a.cancelled || a.dropped) call.abort();
    const res = await call.response;
    if (res.statusCode !== 200) return { call, res: null, failed: await alpha.upstreamError(res, requestId) };
    return { call, res, failed: null };
  }

  /**
   * Speaks a finished reply: holds its characters (402 ends the session like any billed unit), asks
   * the speech upstream for 24 kHz PCM, and streams it as output_audio deltas. The characters are
   * billed once the upstream accepted them (a 200), as the speech routes bill them; the audio
   * delivered is recorded (audio out, priced only where the session model sets an audio_out price).
   */
  private async speak(a: Active, voice: { voice: string; speed: number }, item: Item, outputIndex: number, textOut: string, seq: number):
    Promise<{ characters: number; audioOutMs: number; held: bigint; failure: GatewayError | null }> {
    const tts = this.audio.tts!;
    const characters = [...textOut].length;
    const held = this.charge.cost(usage({ characters, basis: 'exact' }));
    try {
      await this.charge.extend(held);
    } catch (e) {
      if (!(e instanceof GatewayError)) throw e;
      this.end(POLICY, e.code);
      return { characters: 0, audioOutMs: 0, held: 0n, failure: e };
    }
    const req = { model: tts.upstreamModel, input: textOut, voice: presetVoice(voice.voice)?.upstreamVoice ?? voice.voice, response_format: 'pcm', speed: voice.speed };
    let bytes = 0;
    let accepted = false;
    let failure: GatewayError | null = null;
    try {
      const { call, res, failed } = await this.callFor(a, tts.upstream, '/v1/audio/speech', '*/*', Buffer.from(JSON.stringify(req)), `${this.socket.id}-${seq}-speech`);
      failure = failed;
      if (res) {
        accepted = true;
        let odd: Buffer | null = null;
        for await (const chunk of res) {
          let c = chunk as Buffer;
          if (odd) { c = Buffer.concat([odd, c]); odd = null; }
          if (c.length % 2) { odd = c.subarray(c.length - 1); c = c.subarray(0, c.length - 1); }
          if (c.length === 0) continue;
          bytes += c.length;
          if (!a.dropped) await this.emit({ type: 'response.output_audio.delta', response_id: a.id, item_id: item.id, output_index: outputIndex, content_index: 0, delta: c.toString('base64') });
          if (a.cancelled || a.dropped) { call.abort(); break; }
        }
        if (!a.cancelled && !a.dropped && !res.complete) failure = new GatewayError({ status: 502, code: 'upstream_error', message: 'The speech upstream broke off mid-reply.' });
      }
    } catch (e) {
      if (!a.cancelled && !a.dropped) failure = e instanceof GatewayError ? e : new GatewayError({ status: 502, code: 'upstream_error', message: 'The speech upstream failed.' });
    }
    if (!a.dropped && accepted) await this.emit({ type: 'response.output_audio.done', response_id: a.id, item_id: item.id, output_index: outputIndex, content_index: 0 });
    return { characters: accepted ? characters : 0, audioOutMs: Math.floor(bytes / BYTES_PER_MS), held, failure };
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

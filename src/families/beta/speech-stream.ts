// What the stream-input WebSockets share: the query, the session's admission, the text buffer on its chunk schedule, and one generation (held, synthesized, recorded, billed).
import type { Services } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { Charge } from '../../exchange/charge.js';
import { authenticateKey, invalidKey, requireScope } from '../../gate/auth.js';
import { price } from '../../ledger/pricing.js';
import { SpeechMeter } from '../../meter/synthesis.js';
import { log } from '../../observe/log.js';
import type { KeyRecord } from '../../store/keys.js';
import { hashKey } from '../../store/ids.js';
import type { SessionSocket, UpgradeRequest } from '../../server/ws.js';
import { beta } from './family.js';
import { betaPreset } from './presets.js';
import { OUTPUT_FORMATS, WHOLE_FILE_FORMATS, type OutputFormat } from './schemas.js';
import { production, type GenerationStream, type Production } from './produce.js';
import { queryParams, voiceSettingsParams } from './speech-params.js';
import { speechTarget, type SpeechTarget } from './speech-target.js';
import { isNative } from './native.js';

/** ElevenLabs' defaults: 20 s without text closes the socket (or, multi-context, the context); at most 180. */
const INACTIVITY_DEFAULT_S = 20;
const INACTIVITY_MAX_S = 180;
/** The documented default schedule: the first generation at 120 characters, then 160, 250, 290. */
export const DEFAULT_SCHEDULE: readonly number[] = [120, 160, 250, 290];
/** The most text one generation sends upstream (a client that never flushes is cut in pieces this long). */
const MAX_GENERATION_CHARS = 5_000;

/** Close codes: 1000 done, 1001 going away, 1008 a policy refusal (bad parameter, key, balance), 1011 the upstream failed. */
export const NORMAL = 1000;
export const GOING_AWAY = 1001;
export const POLICY = 1008;
export const UPSTREAM_FAILED = 1011;

/** The WebSocket's `output_format` enumeration: the REST one without pcm_48000 and the WAV formats (a WAV header belongs to a whole file; docs/elevenlabs.md, "output_format on REST and on the WebSocket"). */
export const STREAM_FORMATS: readonly OutputFormat[] = OUTPUT_FORMATS.filter((f) => f !== 'pcm_48000' && !WHOLE_FILE_FORMATS.includes(f));

export interface StreamOptions {
  modelId: string | null;
  voiceId: string;
  /** The output format; null when it is refused. How it is made depends on the voice's upstream (openSpeechSession). */
  format: OutputFormat | null;
  /** Why the format is refused (the session then closes with 1008 once open), and the close reason. */
  formatError: { message: string; reason: string } | null;
  inactivityMs: number;
  autoMode: boolean;
  /** The upgrade's headers: the upstream gets those its `forward_headers` names, as on the REST routes. */
  headers: Record<string, string>;
  /** The query, for the speech parameters it may carry (seed, language_code, …: sent on or refused, speech-params.ts). */
  query: Record<string, string>;
}

export function streamOptions(req: UpgradeRequest): StreamOptions {
  const q = req.query;
  const name = q.get('output_format') ?? 'mp3_44100_128';
  const known = (STREAM_FORMATS as readonly string[]).includes(name);
  // An unknown format is refused after the upgrade, with 1008 and a reason, as the family does.
  const formatError: StreamOptions['formatError'] = known ? null
    : { message: `output_format "${name.slice(0, 40)}" is unknown; use one of ${STREAM_FORMATS.join(', ')}`, reason: 'invalid output_format' };
  const t = Number(q.get('inactivity_timeout') ?? INACTIVITY_DEFAULT_S);
  if (!Number.isFinite(t) || t <= 0 || t > INACTIVITY_MAX_S) {
    throw new GatewayError({ status: 422, code: 'invalid_value', param: 'inactivity_timeout', message: `inactivity_timeout must be a number of seconds from 1 to ${INACTIVITY_MAX_S}.` });
  }
  return { modelId: q.get('model_id'), voiceId: req.params.voice_id!, format: known ? name as OutputFormat : null, formatError, inactivityMs: t * 1000,
    autoMode: q.get('auto_mode') === 'true', headers: req.headers, query: Object.fromEntries(q.entries()) };
}

/** What a session speaks with and is billed on: a premade voice and the model `model_id` names, or the caller's cloned voice and its model. */
export interface SpeechSession {
  target: SpeechTarget;
  charge: Charge;
  /** How each generation's audio is made from what the voice's upstream makes, as the REST routes make it. */
  plan: Production;
  /** The query's speech parameters the voice's model honours, sent on with every generation. */
  extra: Record<string, unknown>;
}

/**
 * Resolves the voice for the key's account (another account's cloned voice is not found) and admits
 * the session: its charge holds nothing; each generation extends it by its exact price and settles it.
 */
export async function openSpeechSession(s: Services, key: KeyRecord, sessionId: string, o: StreamOptions, reason: string): Promise<SpeechSession> {
  const target = await speechTarget(s, key.accountId, o.voiceId, o.modelId, betaPreset);
  // Refused before the session is admitted: a query parameter the model cannot honour, a format its upstream's audio cannot make
  // (an ElevenLabs upstream takes the query as it came: native-stream-input.ts).
  const extra = isNative(s, target.model) ? {} : queryParams(s.models.models, target.model, o.query);
  if (!o.format) throw new Error('openSpeechSession: no output format (the caller refuses the session first)');
  const plan = production(o.format, s.upstreams.config(target.model.upstream).speech);
  const charge = await Charge.open(s, { key, id: sessionId, model: target.model, reason,
    worst: { inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: 0, audioOutMs: 0 } });
  return { target, charge, plan, extra };
}

/** The key of a first frame (`xi_api_key`, `xi-api-key` or `authorization`), checked for the voice scope; a GatewayError says why not. */
export async function keyOfFrame(s: Services, m: Record<string, unknown>): Promise<KeyRecord> {
  const given = m.xi_api_key ?? m['xi-api-key'] ?? m.authorization;
  if (typeof given !== 'string' || given === '') {
    throw invalidKey('no API key; send it as the xi-api-key header or `xi_api_key` in the first message.');
  }
  const key = await authenticateKey(s.cache, given.replace(/^Bearer\s+/i, ''));
  requireScope(key, 'voice');
  return key;
}

/**
 * A first frame that carries a key other than the upgrade's: two credentials, refused (401's
 * `invalid_api_key`, a 1008 close on the socket) as an HTTP request with two keys is. The same key
 * again is one credential.
 */
export function checkFrameKey(key: KeyRecord, m: Record<string, unknown>): void {
  const given = m.xi_api_key ?? m['xi-api-key'] ?? m.authorization;
  if (typeof given !== 'string' || given === '') return;
  if (hashKey(given.replace(/^Bearer\s+/i, '')) !== key.hash) {
    throw invalidKey('the first message carries a key other than the one the connection was opened with; send exactly one.');
  }
}

/** The fields a first frame's `voice_settings` adds to each generation's upstream body (`speed`, `voice_settings`). */
export type VoiceFields = Record<string, unknown>;

/**
 * A first frame's `voice_settings`, checked for the session's model: its fields, or a GatewayError
 * (a setting the model's upstream does not take, asking for something: refused, never dropped).
 */
export function voiceOfFrame(s: Services, session: SpeechSession, m: Record<string, unknown>): VoiceFields {
  return voiceSettingsParams(s.models.models, session.target.model, m.voice_settings);
}

/** A later frame that would change the first's voice_settings or generation_config (the same values again, or none, change nothing). */
export function changesFirst(first: { voiceSettings: unknown; config: string }, m: Record<string, unknown>): boolean {
  const voice = m.voice_settings ?? null;
  const config = m.generation_config ?? null;
  return (voice !== null && JSON.stringify(voice) !== JSON.stringify(first.voiceSettings ?? null))
    || (config !== null && JSON.stringify(config) !== first.config);
}

/** What only a first frame carries and Tollgate cannot honour: refused, never dropped (no upstream of the contract takes pronunciation dictionaries). */
export function checkFirstFrame(m: Record<string, unknown>): void {
  const dicts = m.pronunciation_dictionary_locators;
  if (Array.isArray(dicts) && dicts.length > 0) {
    throw new GatewayError({ status: 422, code: 'unsupported_parameter', param: 'pronunciation_dictionary_locators',
      message: 'pronunciation_dictionary_locators are not supported: this gateway has no pronunciation dictionaries.' });
  }
}

/** `generation_config.chunk_length_schedule` of a first frame: absent → the default; invalid → a GatewayError. */
export function scheduleOf(m: Record<string, unknown>): readonly number[] {
  const schedule = (m.generation_config as { chunk_length_schedule?: unknown } | undefined)?.chunk_length_schedule;
  if (schedule === undefined) return DEFAULT_SCHEDULE;
  if (!Array.isArray(schedule) || schedule.length === 0 || !schedule.every((n) => Number.isInteger(n) && n >= 50 && n <= 500)) {
    throw new GatewayError({ status: 422, code: 'invalid_value', param: 'generation_config.chunk_length_schedule',
      message: 'generation_config.chunk_length_schedule must be a list of whole numbers from 50 to 500.' });
  }
  return schedule as number[];
}

/**
 * Text waiting to be spoken, cut into generations by its schedule: the n-th generation waits for schedule[n] characters.
 * What is billed is the text to be spoken: a frame of whitespace only (the protocol's opening `" "`, a
 * `{"text": " ", "flush": true}`) adds no characters; it only keeps two words apart — the text after it
 * gets one space in front when neither side has one.
 */
export class TextBuffer {
  private text = '';
  private cuts = 0;
  /** A whitespace-only frame came after the buffered text. */
  private gap = false;
  constructor(private readonly schedule: readonly number[]) {}

  get pending(): string { return this.text; }
  push(t: string): void {
    if (t.trim() === '') { if (t !== '' && this.text !== '') this.gap = true; return; }
    if (this.gap && this.text !== '' && !/\s$/.test(this.text) && !/^\s/.test(t)) this.text += ' ';
    this.gap = false;
    this.text += t;
  }
  clear(): void { this.text = ''; this.gap = false; }

  /**
   * The next piece due (cut at the last space within its length), or null: due once the buffer holds
   * the schedule's next length, or with `trigger` its first one; `all` takes everything (flush, end).
   */
  take(opts: { trigger?: boolean; all?: boolean } = {}): string | null {
    if (opts.all) {
      if (this.text.trim() === '') { this.text = ''; return null; }
      const n = Math.min(this.text.length, MAX_GENERATION_CHARS);
      return this.cut(n);
    }
    const want = this.schedule[Math.min(this.cuts, this.schedule.length - 1)]!;
    if (this.text.length < want && !(opts.trigger && this.text.length >= this.schedule[0]!)) return null;
    const space = this.text.lastIndexOf(' ', Math.max(want, Math.min(this.text.length, MAX_GENERATION_CHARS)));
    return this.cut(space > 0 ? space + 1 : Math.min(this.text.length, MAX_GENERATION_CHARS));
  }

  private cut(n: number): string | null {
    const piece = this.text.slice(0, n);
    this.text = this.text.slice(n);
    if (piece.trim() === '') return null;
    this.cuts++;
    return piece;
  }
}

/** Each character's start and length in ms, spread evenly over the chunk's audio (the upstream reports none). */
export interface WsAlignment { chars: string[]; charStartTimesMs: number[]; charsDurationsMs: number[] }

export function align(text: string, durationMs: number): WsAlignment {
  const chars = [...text];
  const per = chars.length ? durationMs / chars.length : 0;
  return {
    chars,
    charStartTimesMs: chars.map((_, i) => Math.round(i * per)),
    charsDurationsMs: chars.map((_, i) => Math.round((i + 1) * per) - Math.round(i * per)),
  };
}

/** A generation's end: its audio and alignment; or the session must close (`audio`: what was produced before an upstream broke off). */
export type Generated =
  | { ok: true; audio: Buffer; alignment: WsAlignment }
  | { ok: false; code: number; reason: string; audio: Buffer | null };

/**
 * Runs a session's generations, one at a time: the session's one running record (the limiter keeps
 * one per hold) then always belongs to the generation under way.
 */
export class Generations {
  private seq = 0;
  private chain: Promise<unknown> = Promise.resolve();

  constructor(private readonly s: Services, private readonly sessionId: string, private readonly headers: Record<string, string>) {}

  /** Generations queued and not yet delivered. */
  queued = 0;
  private stopped = false;

  /** Generations queued from now on, or not yet started, do not run (the session is ending). */
  stop(): void { this.stopped = true; }

  /**
   * Queues a generation after those already queued, its audio made as the next piece of `audio`; `deliver` sends its outcome, and the next one
   * starts only once it has (a slow client holds the generations back). Resolves once delivered.
   */
  run(session: SpeechSession, audio: GenerationStream, text: string, voice: VoiceFields, deliver: (g: Generated) => Promise<void>): Promise<void> {
    this.queued++;
    const skipped: Generated = { ok: false, code: GOING_AWAY, reason: '', audio: null };
    const run = this.chain.then(() => (this.stopped ? skipped : this.generate(session, audio, text, voice))).then(deliver).finally(() => { this.queued--; });
    this.chain = run.catch(() => undefined);
    return run;
  }

  /** Resolves once every queued generation has run (and been billed). */
  idle(): Promise<void> { return this.chain.then(() => undefined); }

  /**
   * Holds the text's price (balance, ceiling and an rpm token checked again), asks the upstream for
   * it as the REST routes do (PCM, made into the format by production()), and bills it as a part
   * of the session. The running record of the part is written once the upstream has produced audio,
   * before any of it is sent: a process killed from then on still bills the characters (recovery
   * commits the record); before that, nothing was produced and nothing is billed. Once produced, a
   * generation is billed whether the client stays to hear it or the upstream breaks off.
   */
  private async generate(session: SpeechSession, stream: GenerationStream, text: string, voice: VoiceFields): Promise<Generated> {
    const { charge, target, plan, extra } = session;
    if (!charge.isOpen) return { ok: false, code: GOING_AWAY, reason: '', audio: null };
    const characters = [...text].length;
    const cost = price(target.model.prices, { inputTokens: 0, outputTokens: 0, characters, audioInMs: 0, audioOutMs: 0 });
    try {
      // Each generation is a billed unit: it counts against the key's rpm as a request does.
      await charge.extend(cost, { countsAsRequest: true, cover: true });
    } catch (e) {
      if (e instanceof GatewayError) return { ok: false, code: POLICY, reason: `${e.code}: ${e.message}`, audio: null };
      throw e;
    }
    const seq = ++this.seq;
    // the socket's (context's) stream: Opus generations continue one Ogg stream (produce.ts)
    const meter = new SpeechMeter({ characters }, stream.generation(), plan.contentType, {});
    const parts: Buffer[] = [];
    let pcmBytes = 0;
    let recorded = false;
    let failure: unknown = null;
    try {
      const body = { ...extra, ...voice, model: target.model.upstreamModel, input: text, voice: target.upstreamVoice, response_format: plan.upstreamFormat };
      const call = this.s.upstreams.call(target.model.upstream, 'POST', '/v1/audio/speech', { ...this.headers, 'content-type': 'application/json', accept: '*/*' },
        Buffer.from(JSON.stringify(body)), `${this.sessionId}-${seq}`);
      const res = await call.response;
      if (res.statusCode !== 200) throw await beta.upstreamError(res, this.sessionId);
      const idleMs = this.s.upstreams.config(target.model.upstream).timeoutMs;
      res.setTimeout(idleMs, () => res.destroy(new Error(`no data for ${idleMs} ms`)));
      for await (const chunk of res) {
        pcmBytes += (chunk as Buffer).length;
        const out = meter.onData(chunk as Buffer);
        if (out.length > 0) parts.push(out);
        // The generation's usage (its characters) is whole from its first audio: one record suffices.
        if (meter.produced && !recorded) { recorded = true; await charge.progress(meter.usage(), { seq }); }
      }
      if (!res.complete) throw new Error('the speech upstream ended its reply early');
      parts.push(meter.onEnd(true));
    } catch (e) {
      failure = e;
      meter.onEnd(false);
    }
    // Produced: billed (whole, or partial when the upstream broke off after producing audio).
    // Nothing produced: the stretch held for it is given back.
    await charge.settle(meter.usage(), { seq, final: false, covers: cost });
    const audio = Buffer.concat(parts);
    if (failure !== null) {
      const err = failure instanceof GatewayError ? failure : null;
      log('warn', 'stream-input generation failed', { session: this.sessionId, error: String((failure as Error)?.message ?? failure) });
      const billed = meter.produced ? 'the audio it produced was billed' : 'nothing was billed for this text';
      return { ok: false, code: UPSTREAM_FAILED, reason: `${err?.code ?? 'upstream_error'}: the speech upstream failed; ${billed}.`, audio: meter.produced ? audio : null };
    }
    return { ok: true, audio, alignment: align(text, Math.round((pcmBytes / 2 / plan.pcmRate) * 1000)) };
  }
}

/**
 * Ends a session whose key was revoked (the change feed shows it within about a second): the family's
 * error message (`{message, error, code}`), then the 1008 close with the error's code as its reason.
 * Generations not yet started do not run; the one under way is billed (it was produced).
 */
export function stopSession(socket: SessionSocket, e: GatewayError): void {
  void socket.send(JSON.stringify({ message: e.message, error: e.code, code: POLICY })).then(() => socket.close(POLICY, e.code));
}

/**
 * Refuses a session whose `output_format` was refused (StreamOptions.formatError): the whole reason in a
 * message (a close reason holds 123 bytes), then the family's 1008 close. True when it refused.
 */
export function refusedFormat(socket: SessionSocket, o: StreamOptions): boolean {
  if (!o.formatError) return false;
  const { message, reason } = o.formatError;
  void socket.send(JSON.stringify({ message, error: 'invalid_output_format', code: POLICY })).then(() => socket.close(POLICY, reason));
  return true;
}

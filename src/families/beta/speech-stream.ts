// What the stream-input WebSockets share: the query, the session's admission, the text buffer on its chunk schedule, the session's refusals and ends.
import type { Services } from '../../services.js';
import { CLOSE, closeCode, GatewayError, withMessage } from '../../errors.js';
import { beta } from './family.js';
import { Charge } from '../../exchange/charge.js';
import { authenticateKey, invalidKey, requireScope } from '../../gate/auth.js';
import type { KeyRecord } from '../../store/keys.js';
import { hashKey } from '../../store/ids.js';
import type { EndHow } from '../../exchange/session-end.js';
import { nanoToDecimal } from '../../money.js';
import type { UpgradeRequest } from '../../server/ws.js';
import { betaPreset } from './presets.js';
import { OUTPUT_FORMATS, WHOLE_FILE_FORMATS, type OutputFormat } from './schemas.js';
import { production, type Production } from './produce.js';
import { Pace } from './spoken.js';
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

/** Close codes (their one home is errors.ts's CLOSE): 1000 done, 1001 going away, 1008 a policy refusal, 1011 the upstream failed. */
export const { NORMAL, GOING_AWAY, POLICY, INTERNAL: UPSTREAM_FAILED } = CLOSE;

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
  /** The voice's speaking pace, learnt from the session's finished generations (how a frame's characters are reckoned). */
  pace: Pace;
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
  return { target, charge, plan, extra, pace: new Pace() };
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

/**
 * How a session whose key was revoked ends (the change feed shows it within about a second): the
 * family's error message (`{message, error, code}`), then the 1008 close with the error's code as its
 * reason, at once. Generations not yet started do not run; the one under way finishes and is billed.
 */
export function revoked(e: GatewayError): EndHow {
  return { code: POLICY, reason: e.code, message: JSON.stringify({ message: e.message, error: e.code, code: POLICY }), now: true };
}

/**
 * How a session whose `output_format` was refused (StreamOptions.formatError) ends: the whole reason in a
 * message (a close reason holds 123 bytes), then the family's 1008 close. Null when the format is fine.
 */
export function refusedFormat(o: StreamOptions): EndHow | null {
  if (!o.formatError) return null;
  const { message, reason } = o.formatError;
  return { code: POLICY, reason, message: JSON.stringify({ message, error: 'invalid_output_format', code: POLICY }), now: true };
}

/**
 * How a session is refused or stopped mid-way (the inactivity timeout, too many contexts, an upstream
 * failure): closed at once with `code`. A reason longer than a close frame holds goes first as the
 * family's message `{message, error, code}` (the close then carries its code part). A refusal that is
 * a GatewayError (the key, the money, a limit) goes through `refusedBy`.
 */
export function refusal(code: number, reason: string): EndHow {
  if (Buffer.byteLength(reason) <= 123) return { code, reason, now: true };
  const short = reason.slice(0, reason.indexOf(':') > 0 ? reason.indexOf(':') : 100);
  return { code, reason: short, message: JSON.stringify({ message: reason, error: short, code }), now: true };
}

/**
 * A session ended by an error (a refusal at the first frame, a generation refused its hold): the
 * family's socket rendering of it (src/families/beta/family.ts), told with what the session was
 * billed when `billed` is given. A short one is said in the close reason alone, as ElevenLabs does.
 */
export function refusedBy(e: GatewayError, billed?: bigint): EndHow {
  const told = `${e.code}: ${e.message}${billed === undefined ? '' : ` This session was billed $${nanoToDecimal(billed)} (${billed} nd) in all.`}`;
  if (Buffer.byteLength(told) <= 123) return { code: closeCode(e), reason: told, now: true };
  const r = beta.renderSocket(withMessage(e, told), '');
  return { code: r.close, reason: r.reason, ...(r.frame === null ? {} : { message: r.frame }), now: true };
}

/** A session's end while the socket is open: nothing new starts (`stop`); `idle` once the generation under way has ended. */
export const NO_WORK = { stop(): void {}, idle: (): Promise<void> => Promise.resolve() };

/** The final message (`isFinal: true`) with `cost`: what it closes was billed, in dollars as a JSON number (exact, at most 9 decimals). */
export function finalFrame(fields: Record<string, unknown>, cost: bigint): string {
  return `${JSON.stringify(fields).slice(0, -1)},"cost":${nanoToDecimal(cost)}}`;
}

// WS /beta/v1/text-to-speech/{voice_id}/stream-input: text in as it is written, audio out as it is generated, billed per generation.
import type { Services } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { Charge } from '../../exchange/charge.js';
import { usage } from '../../exchange/usage.js';
import { authenticateKey, requireScope } from '../../gate/auth.js';
import { price } from '../../ledger/pricing.js';
import { collect } from '../../proxy/upstream.js';
import { log } from '../../observe/log.js';
import type { KeyRecord } from '../../store/keys.js';
import type { SessionHandler, SessionSocket, SocketRoute, UpgradeRequest } from '../../server/ws.js';
import { beta } from './family.js';
import { betaPreset } from './presets.js';
import { speechTarget, type SpeechTarget } from './speech-target.js';
import { queryParams } from './speech-params.js';
import { STREAM_FORMAT_NAMES, STREAM_OUTPUT_FORMATS, encodePcm, upstreamFormat, type OutputFormat } from './speech-formats.js';
import { measureAudio } from '../../meter/audio.js';

/** ElevenLabs' defaults: 20 s without text closes the socket; at most 180. */
const INACTIVITY_DEFAULT_S = 20;
const INACTIVITY_MAX_S = 180;
/** The documented default schedule: the first generation at 120 characters, then 160, 250, 290. */
const DEFAULT_SCHEDULE = [120, 160, 250, 290];
/** The most text one generation sends upstream (a client that never flushes is cut in pieces this long). */
const MAX_GENERATION_CHARS = 5_000;

/** Close codes: 1000 done, 1001 going away, 1008 a policy refusal (bad parameter, key, balance). */
const NORMAL = 1000;
const GOING_AWAY = 1001;
const POLICY = 1008;

interface Options {
  modelId: string | null;
  voiceId: string;
  format: OutputFormat;
  formatError: string | null;
  inactivityMs: number;
  autoMode: boolean;
  syncAlignment: boolean;
  query: Record<string, string>;
}

export function streamInputRoute(s: Services): SocketRoute {
  return {
    path: '/v1/text-to-speech/:voice_id/stream-input', name: 'tts.stream_input', scope: 'voice',
    maxMessageBytes: 1024 * 1024,
    keyFrom: { query: ['authorization', 'xi_api_key'] },
    keyInFirstFrame: true,
    async accept(req, key, socket) {
      const o = options(s, req);
      // With a key at the upgrade, the voice is resolved and the session admitted now (balance, ceiling,
      // rpm, its concurrency slot): a refusal is the HTTP error.
      const session = key ? await openSession(s, key, socket, o) : null;
      return new StreamInput(s, socket, o, key, session);
    },
  };
}

function options(s: Services, req: UpgradeRequest): Options {
  const q = req.query;
  const modelId = q.get('model_id');
  const formatName = q.get('output_format') ?? 'mp3_44100_128';
  // An unknown format is refused after the upgrade, with 1008 and a reason, as the family does.
  const format = STREAM_OUTPUT_FORMATS.get(formatName) ?? STREAM_OUTPUT_FORMATS.get('pcm_24000')!;
  const formatError = STREAM_OUTPUT_FORMATS.has(formatName) ? null
    : STREAM_FORMAT_NAMES.includes(formatName)
      ? `output_format ${formatName} is not available here; use one of ${[...STREAM_OUTPUT_FORMATS.keys()].join(', ')}`
      : `output_format "${formatName.slice(0, 40)}" is unknown; use one of ${STREAM_FORMAT_NAMES.join(', ')}`;
  const t = Number(q.get('inactivity_timeout') ?? INACTIVITY_DEFAULT_S);
  if (!Number.isFinite(t) || t <= 0 || t > INACTIVITY_MAX_S) {
    throw new GatewayError({ status: 422, code: 'invalid_value', param: 'inactivity_timeout', message: `inactivity_timeout must be a number of seconds from 1 to ${INACTIVITY_MAX_S}.` });
  }
  return {
    modelId, voiceId: req.params.voice_id!, format, formatError, inactivityMs: t * 1000,
    autoMode: q.get('auto_mode') === 'true', syncAlignment: q.get('sync_alignment') === 'true',
    query: Object.fromEntries(q.entries()),
  };
}

/** What the session speaks with: a premade voice and the model `model_id` names, or the caller's cloned voice and its model. */
interface Session { target: SpeechTarget; charge: Charge }

/**
 * Resolves the voice for the key's account (another account's cloned voice is not found) and admits
 * the session: its charge holds nothing; each generation extends it by its exact price and settles it.
 */
async function openSession(s: Services, key: KeyRecord, socket: SessionSocket, o: Options): Promise<Session> {
  const target = await speechTarget(s, key.accountId, o.voiceId, o.modelId, betaPreset);
  queryParams(s.models.models, target.model, o.query); // refused before the session is admitted when the model cannot honour one
  const charge = await Charge.open(s, { key, id: socket.id, model: target.model, reason: 'tts.stream_input',
    worst: { inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: 0, audioOutMs: 0 } });
  return { target, charge };
}

class StreamInput implements SessionHandler {
  private started = false;
  private ended = false;
  private buffer = '';
  private schedule = DEFAULT_SCHEDULE;
  private generation = 0;
  private timer: NodeJS.Timeout | null = null;
  private voiceSettings: unknown = undefined;
  /** The generation under way: a close or a shutdown waits for it to be billed. */
  private work: Promise<void> = Promise.resolve();

  private charge: Charge | null;
  private target: SpeechTarget | null;

  constructor(private readonly s: Services, private readonly socket: SessionSocket, private readonly o: Options,
    private key: KeyRecord | null, session: Session | null) {
    this.charge = session?.charge ?? null;
    this.target = session?.target ?? null;
  }

  opened(): void {
    if (this.o.formatError) {
      // The whole reason in a message (a close reason holds 123 bytes), then the close the family sends.
      this.ended = true;
      void this.socket.send(JSON.stringify({ message: this.o.formatError, error: 'invalid_output_format', code: POLICY }))
        .then(() => this.socket.close(POLICY, 'invalid output_format'));
      return;
    }
    this.arm();
  }

  async message(data: Buffer, isBinary: boolean): Promise<void> {
    if (this.ended) return;
    if (isBinary) return this.error('Binary frames are not part of this protocol: send JSON text frames.');
    let m: Record<string, unknown>;
    try {
      const v = JSON.parse(data.toString('utf8')) as unknown;
      if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
      m = v as Record<string, unknown>;
    } catch {
      return this.error('The frame is not a JSON object; the session goes on.');
    }
    if (!this.started) return this.first(m);
    this.arm();
    const text = m.text;
    if (text !== undefined && typeof text !== 'string') return this.error('`text` must be a string.');
    if (text === '') return this.finish();
    if (typeof text === 'string') this.buffer += text;
    if (m.flush === true || this.o.autoMode) return this.generate(this.buffer.length);
    await this.runSchedule(m.try_trigger_generation === true);
  }

  /** The first frame: `{"text": " ", voice_settings, generation_config, xi_api_key}`. */
  private async first(m: Record<string, unknown>): Promise<void> {
    if (!this.key) {
      const given = m.xi_api_key ?? m['xi-api-key'] ?? m.authorization;
      if (typeof given !== 'string' || given === '') return this.refuse(POLICY, 'invalid_api_key: no API key; send it as the xi-api-key header or `xi_api_key` in the first message.');
      try {
        this.key = await authenticateKey(this.s.cache, given.replace(/^Bearer\s+/i, ''));
        requireScope(this.key, 'voice');
        const session = await openSession(this.s, this.key, this.socket, this.o);
        this.charge = session.charge;
        this.target = session.target;
      } catch (e) {
        if (e instanceof GatewayError) return this.refuse(POLICY, `${e.code}: ${e.message}`);
        throw e;
      }
    }
    this.started = true;
    this.voiceSettings = m.voice_settings ?? undefined;
    const schedule = (m.generation_config as { chunk_length_schedule?: unknown } | undefined)?.chunk_length_schedule;
    if (schedule !== undefined) {
      if (!Array.isArray(schedule) || schedule.length === 0 || !schedule.every((n) => Number.isInteger(n) && n >= 50 && n <= 500)) {
        return this.refuse(POLICY, 'invalid_value: generation_config.chunk_length_schedule must be a list of whole numbers from 50 to 500.');
      }
      this.schedule = schedule as number[];
    }
    if (typeof m.text === 'string' && m.text.trim() !== '') {
      this.buffer += m.text;
      await this.runSchedule(false);
    }
  }

  /** Generates while the buffer holds the next scheduled length (cut at the last space within it). */
  private async runSchedule(trigger: boolean): Promise<void> {
    for (;;) {
      const want = this.schedule[Math.min(this.generation, this.schedule.length - 1)]!;
      if (this.buffer.length < want && !(trigger && this.buffer.length >= this.schedule[0]!)) return;
      const cut = this.buffer.lastIndexOf(' ', Math.max(want, Math.min(this.buffer.length, MAX_GENERATION_CHARS)));
      await this.generate(cut > 0 ? cut + 1 : Math.min(this.buffer.length, MAX_GENERATION_CHARS));
      if (this.ended) return;
      trigger = false;
    }
  }

  /** Synthesizes the buffer's first `n` characters: hold their price, call the upstream, send the audio, bill it. */
  private generate(n: number): Promise<void> {
    const run = this.work.then(() => this.generateNow(n));
    this.work = run.catch(() => undefined);
    return run;
  }

  private async generateNow(n: number): Promise<void> {
    const text = this.buffer.slice(0, n);
    this.buffer = this.buffer.slice(n);
    if (text.trim() === '' || !this.charge || !this.target) return;
    const chars = [...text].length;
    const units = { inputTokens: 0, outputTokens: 0, characters: chars, audioInMs: 0, audioOutMs: 0 };
    const cost = price(this.target.model.prices, units);
    try {
      // Each generation is a billed unit: it counts against the key's rpm as a request does.
      await this.charge.extend(cost, { countsAsRequest: true });
    } catch (e) {
      if (e instanceof GatewayError) return this.refuse(POLICY, `${e.code}: ${e.message}`);
      throw e;
    }
    const seq = ++this.generation;
    let audio: Buffer;
    let durationMs: number;
    try {
      const raw = await this.synthesize(text, seq);
      if (upstreamFormat(this.o.format) === 'pcm') {
        durationMs = Math.round((raw.length / 2 / 24_000) * 1000);
        audio = encodePcm(raw, this.o.format);
      } else {
        // The upstream's own mp3 / opus: its length read from the stream itself.
        durationMs = (await measureAudio(raw)).durationMs;
        audio = raw;
      }
    } catch (e) {
      // Nothing was produced: the stretch held for it is given back, nothing is billed.
      await this.charge.settle(usage({ characters: 0, basis: 'exact' }), { seq, final: false, covers: cost }).catch(() => undefined);
      const err = e instanceof GatewayError ? e : null;
      log('warn', 'stream-input generation failed', { session: this.socket.id, error: String((e as Error)?.message ?? e) });
      return this.refuse(1011, `${err?.code ?? 'upstream_error'}: the speech upstream failed; nothing was billed for this text.`);
    }
    // Produced: billed whether or not the client is still there to hear it.
    await this.charge.settle(usage({ characters: chars, basis: 'exact' }), { seq, final: false, covers: cost });
    const alignment = align(text, durationMs);
    await this.socket.send(JSON.stringify({
      audio: audio.toString('base64'), isFinal: null,
      normalizedAlignment: alignment, alignment,
    }));
  }

  /** The upstream's OpenAI-compatible speech route, asked for raw 24 kHz PCM (PCM and G.711 are made from it) or its mp3 / opus. */
  private async synthesize(text: string, seq: number): Promise<Buffer> {
    const { model, upstreamVoice } = this.target!;
    const body = { ...queryParams(this.s.models.models, model, this.o.query), model: model.upstreamModel, input: text, voice: upstreamVoice, response_format: upstreamFormat(this.o.format),
      ...(typeof (this.voiceSettings as { speed?: unknown } | undefined)?.speed === 'number' ? { speed: (this.voiceSettings as { speed: number }).speed } : {}) };
    const call = this.s.upstreams.call(model.upstream, 'POST', '/v1/audio/speech', { 'content-type': 'application/json' },
      Buffer.from(JSON.stringify(body)), `${this.socket.id}-${seq}`);
    const res = await call.response;
    if (res.statusCode !== 200) throw await beta.upstreamError(res, this.socket.id);
    return collect(res);
  }

  /** `{"text": ""}`: whatever is buffered is generated, then `{"isFinal": true}` and a normal close. */
  private async finish(): Promise<void> {
    if (this.buffer.trim() !== '') await this.generate(this.buffer.length);
    if (this.ended) return;
    await this.socket.send(JSON.stringify({ audio: null, isFinal: true, normalizedAlignment: null, alignment: null }));
    this.refuse(NORMAL, '');
  }

  private async error(message: string): Promise<void> {
    await this.socket.send(JSON.stringify({ message, error: 'invalid_message', code: POLICY }));
  }

  /**
   * Ends the session: a reason longer than a close frame holds goes first as a message frame; the
   * socket closes with `code`; its charge is released when the close arrives.
   */
  private refuse(code: number, reason: string): void {
    this.ended = true;
    this.disarm();
    if (Buffer.byteLength(reason) <= 123) { this.socket.close(code, reason); return; }
    const short = reason.slice(0, reason.indexOf(':') > 0 ? reason.indexOf(':') : 100);
    void this.socket.send(JSON.stringify({ message: reason, error: short, code })).then(() => this.socket.close(code, short));
  }

  private arm(): void {
    this.disarm();
    this.timer = setTimeout(() => {
      this.refuse(POLICY, `no text received for ${this.o.inactivityMs / 1000} s (inactivity_timeout)`);
    }, this.o.inactivityMs);
    this.timer.unref();
  }

  private disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  async closed(): Promise<void> {
    this.ended = true;
    this.disarm();
    // A generation under way is billed first (it was produced); then the slot is freed (nothing is left held).
    await this.work;
    await this.charge?.release();
  }

  async shutdown(): Promise<void> {
    this.ended = true;
    this.disarm();
    // A generation under way finishes and is billed, then the client hears 1001 (going away).
    await this.work;
    this.socket.close(GOING_AWAY, 'the gateway is shutting down');
    await this.charge?.release();
  }
}

/** Each character's start and length in ms, spread evenly over the chunk's audio (the upstream reports none). */
function align(text: string, durationMs: number): { chars: string[]; charStartTimesMs: number[]; charsDurationsMs: number[] } {
  const chars = [...text];
  const per = chars.length ? durationMs / chars.length : 0;
  return {
    chars,
    charStartTimesMs: chars.map((_, i) => Math.round(i * per)),
    charsDurationsMs: chars.map((_, i) => Math.round((i + 1) * per) - Math.round(i * per)),
  };
}

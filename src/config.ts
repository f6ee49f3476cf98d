// The config file's TypeBox schema, the embedded default, and load-validate-freeze at start-up.
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { dollarsToNano, type Nanodollars } from './money.js';
import type { UnitPrices } from './money.js';
import { SimTranscription, TranscriptionUpstream, simTranscription, transcriptionCaps, type SimTranscriptionOptions, type TranscriptionCaps } from './config-transcription.js';

const Dollars = Type.Union([Type.String({ pattern: '^\\d+(\\.\\d{1,9})?$' }), Type.Number({ minimum: 0 })]);
const EnvName = Type.String({ pattern: '^[A-Z_][A-Z0-9_]*$', description: 'name of an environment variable' });

/** chat and embedding are text; tts, stt and sts are speech; realtime is a speech session. */
export const MODEL_KINDS = ['chat', 'embedding', 'tts', 'stt', 'sts', 'realtime'] as const;
export type ModelKind = typeof MODEL_KINDS[number];

/**
 * The ElevenLabs text-to-speech parameters that change what is spoken and that an upstream may honour:
 * a tts model lists those its upstream takes (`speech_params`), and they are sent on as JSON fields of
 * the same name on `/v1/audio/speech`; the beta family refuses any other one (422) rather than drop it.
 */
export const SPEECH_PARAMS = ['seed', 'language_code', 'previous_text', 'next_text', 'previous_request_ids', 'next_request_ids',
  'apply_text_normalization', 'apply_language_text_normalization', 'voice_settings', 'enable_ssml_parsing'] as const;
export type SpeechParam = typeof SPEECH_PARAMS[number];
/** The `response_format` values of the OpenAI-compatible speech route (docs/upstreams.md). */
export const SPEECH_FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
export type SpeechFormat = typeof SPEECH_FORMATS[number];

const Upstream = Type.Object({
  base_url: Type.Optional(Type.String({ pattern: '^https?://' })),
  sim: Type.Optional(Type.Object({
    token_delay_ms: Type.Optional(Type.Integer({ minimum: 0 })),
    transcription: Type.Optional(SimTranscription),
  }, { additionalProperties: false })),
  api_key_env: Type.Optional(EnvName),
  protocol: Type.Union([Type.Literal('openai'), Type.Literal('elevenlabs')], { default: 'openai',
    description: 'what it speaks: openai (the OpenAI-compatible contracts, key sent as Authorization: Bearer) or elevenlabs (ElevenLabs\' own API: the beta family is sent on natively, key sent as xi-api-key; docs/upstreams.md)' }),
  timeout_ms: Type.Integer({ minimum: 100, default: 120_000 }),
  responses_api: Type.Boolean({ default: false, description: 'the upstream serves /v1/responses itself (passed through, not translated)' }),
  continuous_usage_stats: Type.Boolean({ default: false, description: 'the upstream reports running usage on every streamed chunk (vLLM)' }),
  usage_per_task: Type.Boolean({ default: false, description: 'the upstream runs one task per choice and per prompt, and a whole reply\'s usage counts one task only (llama.cpp): such requests are sent as streams and every task billed' }),
  prompt_progress: Type.Boolean({ default: false, description: 'the upstream streams prompt progress on request (llama.cpp return_progress): a stream cut before its usage is billed its prompt count' }),
  realtime_api: Type.Boolean({ default: false, description: 'the upstream serves OpenAI\'s realtime WebSocket protocol at /v1/realtime itself: its realtime models are passed through, metered from its response.done' }),
  forward_headers: Type.Optional(Type.Array(Type.String({ pattern: '^[a-z0-9-]+\\*?$' }), { description: 'client headers passed on besides content-type and accept (a trailing * matches a prefix)' })),
  speech_formats: Type.Optional(Type.Array(Type.Union(SPEECH_FORMATS.map((f) => Type.Literal(f))), { minItems: 1, uniqueItems: true,
    description: 'the response_format values its /v1/audio/speech makes (default: all six); Tollgate makes the others from its pcm or wav' })),
  speech_pcm_rate: Type.Integer({ minimum: 8000, maximum: 48_000, default: 24_000, description: 'the sample rate of its speech pcm (Hz): 24000 as OpenAI; Piper voices 22050 or 16000' }),
  // Transcription capabilities (src/config-transcription.ts).
  transcription: TranscriptionUpstream,
  // Protection and health (src/proxy/pool.ts, docs/upstreams.md "Pools").
  max_concurrency: Type.Optional(Type.Integer({ minimum: 1, description: 'requests in flight to this upstream at most; past it a request waits in the queue, goes to another upstream, or gets 503 upstream_busy' })),
  rpm: Type.Optional(Type.Integer({ minimum: 1, description: 'requests started on this upstream per minute at most (a sliding minute), with the same queue' })),
  queue_ms: Type.Integer({ minimum: 0, default: 1000, description: 'how long a request waits for a full upstream before 503 upstream_busy' }),
  queue_size: Type.Integer({ minimum: 0, default: 64, description: 'requests that may wait for this upstream at once; more get 503 upstream_busy at once' }),
  health: Type.Object({
    eject_after: Type.Integer({ minimum: 1, default: 3, description: 'consecutive failures (connect failures, 5xx, timeouts) that eject the upstream' }),
    eject_ms: Type.Integer({ minimum: 100, default: 5000, description: 'the first ejection\'s length; each further one in a row doubles it' }),
    max_eject_ms: Type.Integer({ minimum: 100, default: 60_000, description: 'the longest ejection' }),
    probe_path: Type.String({ pattern: '^/', default: '/v1/models', description: 'the active probe: a GET, unbilled, never a generation' }),
    probe_interval_ms: Type.Integer({ minimum: 0, default: 10_000, description: 'how often the probe runs, for upstreams in a pool of two or more (0: never)' }),
  }, { additionalProperties: false, default: {} }),
}, { additionalProperties: false });

/** One upstream of a model's pool: by name, or with its weight, priority (0 is best) and model name there. */
const PoolEntry = Type.Union([
  Type.String({ minLength: 1 }),
  Type.Object({
    name: Type.String({ minLength: 1 }),
    weight: Type.Integer({ minimum: 1, maximum: 1000, default: 1 }),
    priority: Type.Integer({ minimum: 0, maximum: 100, default: 0 }),
    upstream_model: Type.Optional(Type.String({ minLength: 1 })),
  }, { additionalProperties: false }),
]);

const Model = Type.Object({
  id: Type.String({ minLength: 1 }),
  upstream: Type.Union([Type.String({ minLength: 1 }), Type.Array(PoolEntry, { minItems: 1 })]),
  upstream_model: Type.Optional(Type.String({ minLength: 1 })),
  aliases: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
  kind: Type.Union(MODEL_KINDS.map((k) => Type.Literal(k))),
  description: Type.Optional(Type.String()),
  simulated: Type.Boolean({ default: false }),
  input_per_mtok: Type.Optional(Dollars),
  output_per_mtok: Type.Optional(Dollars),
  per_mchar: Type.Optional(Dollars),
  audio_in_per_minute: Type.Optional(Dollars),
  audio_in_per_second: Type.Optional(Dollars),
  audio_out_per_minute: Type.Optional(Dollars),
  audio_out_per_second: Type.Optional(Dollars),
  audio_input_per_mtok: Type.Optional(Dollars),
  audio_output_per_mtok: Type.Optional(Dollars),
  cached_input_per_mtok: Type.Optional(Dollars),
  max_output_tokens: Type.Integer({ minimum: 1, default: 8192 }),
  batch_discount_percent: Type.Integer({ minimum: 0, maximum: 100, default: 0, description: 'batch lines cost the live prices less this percentage' }),
  voice_cloning: Type.Boolean({ default: false, description: 'a tts model whose upstream clones voices from samples (docs/upstreams.md): cloned voices synthesize with it' }),
  fallbacks: Type.Array(Type.String({ minLength: 1 }), { default: [], uniqueItems: true, maxItems: 8,
    description: 'chat models (ids or aliases) a request for this one is tried on, in order, when its upstreams cannot serve it: only for keys that opted in (fallback)' }),
  speech_params: Type.Array(Type.Union(SPEECH_PARAMS.map((p) => Type.Literal(p))), {
    default: [], uniqueItems: true, description: 'the beta family\'s speech parameters this tts model\'s upstream honours, sent on as extra JSON fields of /v1/audio/speech (a sts model: voice_settings, sent on as a form field of /v1/audio/voice-conversion)' }),
}, { additionalProperties: false });

export const ConfigSchema = Type.Object({
  listen: Type.String({ pattern: '^[^:]+:\\d+$', default: '127.0.0.1:8080' }),
  public_url: Type.Optional(Type.String({ pattern: '^https?://' })),
  workers: Type.Integer({ minimum: 1, maximum: 64, default: 1, description: 'gateway processes sharing the listen port; more than 1 needs database and redis' }),
  frontend: Type.Union([Type.Literal('auto'), Type.Literal('uws'), Type.Literal('node')], { default: 'auto',
    description: 'what serves HTTP and WebSocket: uws (uWebSockets.js), node (node:http), auto (uws where its binary loads on this Node, else node); TOLLGATE_FRONTEND overrides it' }),
  database: Type.Optional(Type.Object({ url_env: EnvName, pool_size: Type.Integer({ minimum: 1, default: 10 }) }, { additionalProperties: false })),
  // url_env's URL: redis:// or rediss:// (one server), redis+cluster://h1:p1,h2:p2 (a Redis Cluster), or
  // redis+sentinel://s1:p1,s2:p2/<master name> (Sentinel); src/gate/limits/redis-connect.ts reads it.
  redis: Type.Optional(Type.Object({ url_env: EnvName, key_prefix: Type.String({ default: 'tollgate:', pattern: '^[^{}]*$',
    description: 'prepended to every Redis key; no braces (the keys carry Redis Cluster hash tags)' }) }, { additionalProperties: false })),
  routing: Type.Object({
    max_attempts: Type.Integer({ minimum: 1, maximum: 10, default: 3, description: 'upstreams one request may be tried on, each a different one, under the retry rule (README)' }),
  }, { additionalProperties: false, default: {} }),
  limits: Type.Object({
    default_rpm: Type.Integer({ minimum: 1, default: 600 }),
    default_concurrency: Type.Integer({ minimum: 1, default: 32 }),
    max_body_bytes: Type.Integer({ minimum: 1024, default: 4 * 1024 * 1024 }),
    allow_overdraft: Type.Boolean({ default: false, description: 'admit a known cost on balance > 0 alone (one request may take the balance below zero)' }),
    overlap_admission: Type.Boolean({ default: true, description: 'with Redis: start the upstream call while admission places the hold when the request is far from every limit (abandoned unbilled if refused)' }),
    spare_holds: Type.Boolean({ default: true, description: 'with Redis and overlap_admission: after a request of a key far from every limit, admit its next one on this instance in advance (one per request that ended, or several in one call for a busy key, up to an eighth of the key\'s concurrency and at most 8 per key; each given back after 2 s unused)' }),
    upload_bytes: Type.Integer({ minimum: 1024, default: 25 * 1024 * 1024, description: 'the largest file an upload route takes (413 past it)' }),
    route_upload_bytes: Type.Record(Type.String({ minLength: 1 }), Type.Integer({ minimum: 1024 }), { default: {}, description: 'upload_bytes for one route, by its name (audio.transcriptions, …)' }),
    storage_bytes_per_account: Type.Integer({ minimum: 0, default: 5 * 1024 ** 3, description: 'bytes one account may keep stored: its files and its cloned voices\' samples (an upload past it is refused)' }),
  }, { additionalProperties: false, default: {} }),
  voices: Type.Object({
    max_per_account: Type.Integer({ minimum: 0, default: 30, description: 'cloned voices one account may hold at once (the subscription\'s voice_limit)' }),
    max_samples: Type.Integer({ minimum: 1, maximum: 1000, default: 25, description: 'audio samples one POST /beta/v1/voices/add may carry' }),
    max_request_bytes: Type.Integer({ minimum: 1024, default: 100 * 1024 * 1024, description: 'the largest POST /beta/v1/voices/add body, all samples and fields together (413 past it)' }),
  }, { additionalProperties: false, default: {} }),
  upstreams: Type.Record(Type.String({ pattern: '^[a-z0-9_-]+$' }), Upstream),
  models: Type.Array(Model, { minItems: 1 }),
  batches: Type.Object({
    concurrency: Type.Integer({ minimum: 0, maximum: 1024, default: 8, description: 'batch lines one process runs at once (0: this process runs no batch work)' }),
    poll_ms: Type.Integer({ minimum: 10, default: 1000, description: 'how often an idle worker looks for batch work' }),
    lease_ms: Type.Integer({ minimum: 500, default: 30_000, description: 'a claim not renewed for this long is taken over' }),
    max_file_bytes: Type.Integer({ minimum: 1, default: 200 * 1024 * 1024, description: 'largest upload to POST /files' }),
  }, { additionalProperties: false, default: {} }),
  realtime: Type.Object({
    transcription_model: Type.Optional(Type.String({ minLength: 1, description: 'the stt model that transcribes a realtime session\'s committed input audio (default: the first stt model)' })),
    speech_model: Type.Optional(Type.String({ minLength: 1, description: 'the tts model that speaks a realtime session\'s audio output (default: the first tts model that does not clone voices)' })),
    idle_timeout_s: Type.Integer({ minimum: 1, maximum: 86_400, default: 600, description: 'a realtime session with no client event and no response under way for this long gets an error event and is closed (1008)' }),
  }, { additionalProperties: false, default: {} }),
  payments: Type.Object({
    // Required in a config file (checked below): only the embedded default falls back to the sandbox.
    provider: Type.Optional(Type.Union([Type.Literal('sandbox'), Type.Literal('stripe')])),
    allow_sandbox: Type.Boolean({ default: false, description: 'a config file may run the sandbox, which takes no real money' }),
    secret_key_env: Type.Optional(EnvName),
    webhook_secret_env: Type.Optional(EnvName),
    api_base: Type.Optional(Type.String({ pattern: '^https?://', description: "Stripe's API host; tests point it at a local stand-in" })),
    currency: Type.String({ default: 'usd' }),
    return_origins: Type.Array(Type.String({ pattern: '^https?://', maxLength: 2048 }), {
      default: [], description: 'origins besides the gateway\'s own that a checkout return_url may lead to' }),
  }, { additionalProperties: false, default: {} }),
  status: Type.Object({
    last_reviewed: Type.Object({
      compatibility: Type.String({ pattern: '^\\d{4}-\\d{2}-\\d{2}$', default: '2026-08-25' }),
      authentication: Type.String({ pattern: '^\\d{4}-\\d{2}-\\d{2}$', default: '2026-08-25' }),
      billing: Type.String({ pattern: '^\\d{4}-\\d{2}-\\d{2}$', default: '2026-08-25' }),
    }, { additionalProperties: false, default: {}, description: 'the date each area was last reviewed, shown on the status page as last_reviewed_at' }),
    probe_ms: Type.Integer({ minimum: 100, default: 1000, description: 'how often PostgreSQL, Redis and each upstream (a TCP connect, never a request) are probed' }),
  }, { additionalProperties: false, default: {} }),
  telemetry: Type.Object({
    otlp_endpoint: Type.Optional(Type.String({ pattern: '^https?://', description: 'an OTLP/HTTP collector (spans are POSTed as JSON to <endpoint>/v1/traces); unset: no tracing at all' })),
    service_name: Type.String({ default: 'tollgate' }),
    headers_env: Type.Optional(EnvName),
  }, { additionalProperties: false, default: {} }),
  console: Type.Object({
    secure_cookies: Type.Optional(Type.Boolean({ description: 'defaults to true when public_url is https' })),
  }, { additionalProperties: false, default: {} }),
  demo: Type.Object({
    credit: Dollars,
    email: Type.String({ default: 'demo@tollgate.local' }),
  }, { additionalProperties: false, default: { credit: '10', email: 'demo@tollgate.local' } }),
}, { additionalProperties: false });

export type RawConfig = Static<typeof ConfigSchema>;

/** One upstream of a model's pool (docs/upstreams.md "Pools"). */
export interface PoolEntry { name: string; weight: number; priority: number; upstreamModel: string }

export interface ModelConfig {
  id: string;
  /** The pool's first upstream: the one whose capabilities the routes read (every request, session and clone goes over `pool`). */
  upstream: string;
  /** Every upstream that serves the model (one entry when `upstream` names one). */
  pool: readonly PoolEntry[];
  upstreamModel: string;
  aliases: string[];
  kind: ModelKind;
  description: string | undefined;
  simulated: boolean;
  prices: UnitPrices;
  /** What a batch line pays per unit (the live prices less batch_discount_percent). */
  batchPrices: UnitPrices;
  maxOutputTokens: number;
  /** A tts model whose upstream clones voices (the voice-cloning contract); cloned voices synthesize with it. */
  voiceCloning: boolean;
  /** The beta speech parameters its upstream honours (sent on); any other one is refused. */
  speechParams: readonly SpeechParam[];
  /** A realtime model on a `realtime_api` upstream: its sessions are relayed to the upstream's own realtime socket. */
  passthrough: boolean;
  /** Chat models (ids) a request for this one may fall back to, in order: only for a key that opted in. */
  fallbacks: readonly string[];
}

export interface UpstreamConfig {
  name: string;
  baseUrl: string | undefined;
  sim: { tokenDelayMs: number; transcription?: SimTranscriptionOptions } | undefined;
  apiKeyEnv: string | undefined;
  /** `elevenlabs`: ElevenLabs' own API (the beta family's requests go on natively, the key as xi-api-key); `openai`: the OpenAI-compatible contracts. */
  protocol: 'openai' | 'elevenlabs';
  timeoutMs: number;
  continuousUsage: boolean;
  /** A whole reply's usage counts one task (llama.cpp): a buffered request with several is asked as a stream. */
  usagePerTask: boolean;
  /** Streams are asked for llama.cpp's `prompt_progress` reports, whose `total` is the prompt's token count. */
  promptProgress: boolean;
  responsesApi: boolean;
  /** Serves the realtime WebSocket protocol at /v1/realtime itself (a pass-through target). */
  realtimeApi: boolean;
  /** Client headers passed on besides content-type and accept: exact names, and prefixes (ending in `*`). */
  forwardHeaders: { names: string[]; prefixes: string[] };
  /** What its /v1/audio/speech makes: the formats, and the sample rate of its `pcm`. */
  speech: SpeechCaps;
  /** What its transcription routes do (field name, formats, streaming). */
  transcription: TranscriptionCaps;
  /** In flight and started per minute at most (undefined: no bound), and the queue past them. */
  maxConcurrency: number | undefined;
  rpm: number | undefined;
  queueMs: number;
  queueSize: number;
  health: { ejectAfter: number; ejectMs: number; maxEjectMs: number; probePath: string; probeIntervalMs: number };
}

export interface SpeechCaps { formats: readonly SpeechFormat[]; pcmRate: number }

export interface Config {
  listen: { host: string; port: number };
  workers: number;
  /** The front end asked for (server/frontend.ts resolves `auto`). */
  frontend: 'auto' | 'uws' | 'node';
  publicUrl: string | undefined;
  databaseUrl: string | undefined;
  poolSize: number;
  redisUrl: string | undefined;
  redisPrefix: string;
  limits: { defaultRpm: number; defaultConcurrency: number; maxBodyBytes: number; allowOverdraft: boolean; overlapAdmission: boolean; spareHolds: boolean; uploadBytes: number; routeUploadBytes: Readonly<Record<string, number>>;
    /** Bytes one account may keep stored (files and voice samples). */
    storageBytesPerAccount: number; };
  /** Cloned voices: how many an account holds, how many samples one clone takes, how large one clone request may be. */
  voices: { maxPerAccount: number; maxSamples: number; maxRequestBytes: number };
  /** How often expired files are deleted (ms). */
  fileSweepMs: number;
  upstreams: Map<string, UpstreamConfig>;
  models: ModelConfig[];
  /** How many upstreams one request may be tried on (the retry rule). */
  routing: { maxAttempts: number };
  batches: { concurrency: number; pollMs: number; leaseMs: number; maxFileBytes: number };
  /** The models a realtime session's audio goes through (ids; undefined: no such model is configured, audio is refused). */
  realtime: { transcriptionModel: string | undefined; speechModel: string | undefined; idleTimeoutMs: number };
  demo: { credit: Nanodollars; email: string };
  payments: {
    provider: 'sandbox' | 'stripe'; secretKey: string | undefined; webhookSecret: string; apiBase: string | undefined; currency: string;
    /** Where a return_url may lead besides the gateway itself: origins only (`https://host[:port]`). */
    returnOrigins: string[];
  };
  console: { secureCookies: boolean };
  /** The status page's last-reviewed dates per area (YYYY-MM-DD), and how often dependencies are probed (ms). */
  status: { lastReviewed: { compatibility: string; authentication: string; billing: string }; probeMs: number };
  /** OpenTelemetry export: off (endpoint undefined) unless configured; headers from `headers_env` (`k=v,k2=v2`, as OTEL_EXPORTER_OTLP_HEADERS). */
  telemetry: { otlpEndpoint: string | undefined; serviceName: string; headers: Record<string, string> };
  embedded: boolean;
}

export class ConfigError extends Error {}

/** Set by a `workers: N` primary for its workers: its sandbox webhook secret, so any worker verifies what another signed. */
export const SANDBOX_SECRET_ENV = 'TOLLGATE_SANDBOX_WEBHOOK_SECRET';

/** What sim's speech takes besides its text (docs/upstreams.md, "sim's round trip"). */
const SIM_SPEECH_PARAMS: SpeechParam[] = ['seed', 'language_code', 'previous_text', 'next_text'];

/** The embedded default: simulated chat (priced as the seed's 27B model), embedding, text-to-speech, voice conversion, realtime and transcription models. */
export const EMBEDDED_DEFAULT: unknown = {
  upstreams: { sim: { sim: {} } },
  models: [
    { id: 'sim-chat', upstream: 'sim', aliases: ['tollgate-27b'], kind: 'chat', simulated: true,
      description: 'Simulated chat model (test infrastructure), priced as a 27B text model',
      input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 },
    { id: 'sim-reasoner', upstream: 'sim', kind: 'chat', simulated: true,
      description: 'Simulated reasoning chat model (test infrastructure)',
      input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096 },
    { id: 'sim-embed', upstream: 'sim', kind: 'embedding', simulated: true,
      description: 'Simulated embedding model (test infrastructure)',
      input_per_mtok: '0.02', output_per_mtok: '0', max_output_tokens: 1 },
    { id: 'sim-tts-clone', upstream: 'sim', kind: 'tts', simulated: true, voice_cloning: true, speech_params: SIM_SPEECH_PARAMS,
      description: 'Simulated text-to-speech model that clones voices from samples (test infrastructure)', per_mchar: '30' },
    { id: 'sim-sts', upstream: 'sim', kind: 'sts', simulated: true, aliases: ['eleven_english_sts_v2', 'eleven_multilingual_sts_v2'],
      description: 'Simulated voice conversion (test infrastructure)', audio_in_per_minute: '0.18' },
    { id: 'sim-tts', upstream: 'sim', kind: 'tts', simulated: true, speech_params: SIM_SPEECH_PARAMS,
      aliases: ['tts-1', 'tts-1-hd', 'gpt-4o-mini-tts', 'eleven_multilingual_v2', 'eleven_v3', 'eleven_flash_v2_5', 'eleven_flash_v2', 'eleven_turbo_v2_5', 'eleven_turbo_v2', 'eleven_monolingual_v1', 'eleven_multilingual_v1'],
      description: 'Simulated text-to-speech model (test infrastructure), priced as OpenAI tts-1 ($15 per million characters)', per_mchar: '15' },
    { id: 'sim-realtime', upstream: 'sim', upstream_model: 'sim-chat', kind: 'realtime', simulated: true,
      aliases: ['gpt-realtime', 'gpt-4o-realtime-preview', 'gpt-4o-mini-realtime-preview'],
      description: 'Simulated realtime model (test infrastructure): audio in by the minute, text tokens, and the characters it speaks',
      audio_in_per_minute: '0.06', input_per_mtok: '4.00', output_per_mtok: '16.00', per_mchar: '15', max_output_tokens: 4096 },
    { id: 'sim-stt', upstream: 'sim', kind: 'stt', simulated: true,
      aliases: ['whisper-1', 'gpt-4o-transcribe', 'gpt-4o-mini-transcribe', 'scribe_v1', 'scribe_v1_experimental', 'scribe_v2'],
      description: 'Simulated transcription model (test infrastructure), priced as OpenAI whisper-1 ($0.006 per audio minute)', audio_in_per_minute: '0.006' },
  ],
};

/** The largest file the upload route named `route` takes: its `limits.route_upload_bytes`, else `limits.upload_bytes`. */
export function routeUploadBytes(c: Config, route: string): number {
  return c.limits.routeUploadBytes[route] ?? c.limits.uploadBytes;
}

export function loadConfigFile(path: string, env: NodeJS.ProcessEnv = process.env): Config {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new ConfigError(`config ${path}: ${(e as Error).message}`);
  }
  return buildConfig(raw, env, false, path);
}

export function embeddedConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return buildConfig(structuredClone(EMBEDDED_DEFAULT), env, true, 'embedded default');
}

function buildConfig(raw: unknown, env: NodeJS.ProcessEnv, embedded: boolean, source: string): Config {
  const withDefaults = Value.Default(ConfigSchema, Value.Clone(raw)) as Record<string, unknown>;
  // Value.Default does not reach into Record values: fill each upstream's defaults itself.
  const ups = withDefaults?.upstreams;
  if (ups && typeof ups === 'object') {
    for (const [k, v] of Object.entries(ups)) (ups as Record<string, unknown>)[k] = Value.Default(Upstream, v);
  }
  const errors = [...Value.Errors(ConfigSchema, withDefaults)];
  if (errors.length > 0) {
    const lines = errors.slice(0, 10).map((e) => `  ${e.path || '/'}: ${e.message}`);
    throw new ConfigError(`config ${source} is invalid:\n${[...new Set(lines)].join('\n')}`);
  }
  const c = withDefaults as RawConfig;
  const fail = (field: string, msg: string): never => { throw new ConfigError(`config ${source} is invalid:\n  ${field}: ${msg}`); };
  const upstreams = new Map<string, UpstreamConfig>();
  for (const [name, u] of Object.entries(c.upstreams)) {
    if (!u.base_url === !u.sim) fail(`/upstreams/${name}`, 'set exactly one of base_url or sim');
    if (u.protocol === 'elevenlabs' && !u.base_url) fail(`/upstreams/${name}/protocol`, 'an elevenlabs upstream needs base_url (https://api.elevenlabs.io)');
    if (u.api_key_env && env[u.api_key_env] === undefined) fail(`/upstreams/${name}/api_key_env`, `environment variable ${u.api_key_env} is not set`);
    if (u.base_url) checkBaseUrl(u.base_url, (msg) => fail(`/upstreams/${name}/base_url`, msg));
    upstreams.set(name, {
      name, baseUrl: u.base_url?.replace(/\/+$/, ''), sim: u.sim ? { tokenDelayMs: u.sim.token_delay_ms ?? 0, transcription: simTranscription(u.sim.transcription) } : undefined,
      apiKeyEnv: u.api_key_env, protocol: u.protocol, timeoutMs: u.timeout_ms,
      continuousUsage: u.continuous_usage_stats || Boolean(u.sim), promptProgress: u.prompt_progress, usagePerTask: u.usage_per_task, responsesApi: u.responses_api, realtimeApi: u.realtime_api,
      // An in-process sim takes its test controls (x-sim-*) unless told otherwise.
      forwardHeaders: headerRules(u.forward_headers ?? (u.sim ? ['x-sim-*'] : [])),
      speech: { formats: Object.freeze([...(u.speech_formats ?? SPEECH_FORMATS)]), pcmRate: u.speech_pcm_rate },
      transcription: transcriptionCaps(u.transcription),
      maxConcurrency: u.max_concurrency, rpm: u.rpm, queueMs: u.queue_ms, queueSize: u.queue_size,
      health: { ejectAfter: u.health.eject_after, ejectMs: u.health.eject_ms, maxEjectMs: Math.max(u.health.max_eject_ms, u.health.eject_ms),
        probePath: u.health.probe_path, probeIntervalMs: u.health.probe_interval_ms },
    });
  }
  const seen = new Set<string>();
  const models = c.models.map((m, i): ModelConfig => {
    const pool = poolOf(m, i, upstreams, fail);
    for (const name of [m.id, ...m.aliases]) {
      if (seen.has(name)) fail(`/models/${i}/id`, `model id or alias "${name}" is used twice`);
      seen.add(name);
    }
    if (m.voice_cloning && m.kind !== 'tts') fail(`/models/${i}/voice_cloning`, 'only a tts model clones voices');
    if (m.kind === 'sts') {
      // Voice conversion takes the family's voice_settings and nothing else of the list.
      if (m.speech_params.some((p) => p !== 'voice_settings')) fail(`/models/${i}/speech_params`, 'a sts model takes only voice_settings');
    } else if (m.speech_params.length > 0 && m.kind !== 'tts') fail(`/models/${i}/speech_params`, 'only a tts or sts model takes speech parameters');
    // ElevenLabs' own API serves the beta family's speech routes natively, and nothing else.
    if (upstreams.get(pool[0]!.name)!.protocol === 'elevenlabs' && !['tts', 'stt', 'sts'].includes(m.kind)) fail(`/models/${i}/kind`, 'an elevenlabs upstream serves only tts, stt and sts models');
    const passthrough = m.kind === 'realtime' && upstreams.get(pool[0]!.name)!.realtimeApi;
    for (const f of ['audio_input_per_mtok', 'audio_output_per_mtok', 'cached_input_per_mtok'] as const) {
      if (m[f] !== undefined && !passthrough) fail(`/models/${i}/${f}`, 'only a realtime model on a realtime_api upstream is billed audio or cached tokens');
    }
    const prices = unitPrices(m, i, fail, passthrough);
    return {
      id: m.id, upstream: pool[0]!.name, pool, upstreamModel: m.upstream_model ?? m.id, aliases: m.aliases, kind: m.kind,
      description: m.description, simulated: m.simulated, prices, batchPrices: discounted(prices, m.batch_discount_percent),
      maxOutputTokens: m.max_output_tokens, voiceCloning: m.voice_cloning, speechParams: m.speech_params, passthrough, fallbacks: [],
    };
  });
  // Fallbacks name models of the same kind (only chat routes fall back), each by its id once all are known.
  c.models.forEach((m, i) => {
    if (m.fallbacks.length > 0 && m.kind !== 'chat') fail(`/models/${i}/fallbacks`, 'only a chat model falls back to other models');
    const ids = m.fallbacks.map((name, j) => {
      const f = models.find((x) => x.id === name || x.aliases.includes(name));
      if (!f) return fail(`/models/${i}/fallbacks/${j}`, `no model named "${name}"`);
      if (f.kind !== m.kind) fail(`/models/${i}/fallbacks/${j}`, `"${name}" is a ${f.kind} model, not ${m.kind}`);
      if (f.id === m.id) fail(`/models/${i}/fallbacks/${j}`, `"${name}" is this model itself`);
      return f.id;
    });
    models[i]!.fallbacks = [...new Set(ids)];
  });
  const realtimeModel = (field: 'transcription_model' | 'speech_model', kind: 'stt' | 'tts'): string | undefined => {
    const name = c.realtime[field];
    // A realtime session speaks to its models through the OpenAI-compatible contracts: an elevenlabs upstream's models are not its default.
    const contract = models.filter((m) => upstreams.get(m.upstream)!.protocol === 'openai');
    if (name === undefined) return (contract.find((m) => m.kind === kind && !m.voiceCloning) ?? contract.find((m) => m.kind === kind))?.id;
    const m = models.find((x) => x.id === name || x.aliases.includes(name));
    if (!m || m.kind !== kind) fail(`/realtime/${field}`, `no ${kind} model named "${name}"`);
    return m!.id;
  };
  const realtime = { transcriptionModel: realtimeModel('transcription_model', 'stt'), speechModel: realtimeModel('speech_model', 'tts'), idleTimeoutMs: c.realtime.idle_timeout_s * 1000 };
  const [host, portText] = splitHostPort(c.listen);
  const databaseUrl = c.database ? env[c.database.url_env] : undefined;
  if (c.database && !databaseUrl) fail('/database/url_env', `environment variable ${c.database.url_env} is not set`);
  const redisUrl = c.redis ? env[c.redis.url_env] : undefined;
  if (c.redis && !redisUrl) fail('/redis/url_env', `environment variable ${c.redis.url_env} is not set`);
  if (c.workers > 1 && (!c.database || !c.redis)) {
    fail('/workers', 'more than one worker needs database and redis: the embedded store and in-process limits live in one process');
  }
  const p = c.payments;
  // A config file is a deployment: it must say how money is taken, and the sandbox (which takes none) only on purpose.
  const provider = p.provider ?? (embedded ? 'sandbox'
    : fail('/payments/provider', 'a config file must name its payment provider: "stripe", or "sandbox" (no real money is taken) with "allow_sandbox": true'));
  if (provider === 'sandbox' && !embedded && !p.allow_sandbox) {
    fail('/payments/allow_sandbox', 'the sandbox provider credits balances and takes no real money; set "allow_sandbox": true to run it from a config file');
  }
  if (provider === 'stripe') {
    if (!p.secret_key_env) fail('/payments/secret_key_env', 'the stripe provider needs secret_key_env');
    if (!p.webhook_secret_env) fail('/payments/webhook_secret_env', 'the stripe provider needs webhook_secret_env');
  }
  const returnOrigins = p.return_origins.map((o, i) => originOf(o) ?? fail(`/payments/return_origins/${i}`, 'must be an origin: scheme, host and port only, like https://app.example.com'));
  for (const f of ['secret_key_env', 'webhook_secret_env'] as const) {
    const name = p[f];
    if (name && env[name] === undefined) fail(`/payments/${f}`, `environment variable ${name} is not set`);
  }
  const config: Config = {
    listen: { host, port: portText },
    workers: c.workers,
    frontend: c.frontend,
    publicUrl: c.public_url?.replace(/\/+$/, ''),
    databaseUrl, poolSize: c.database?.pool_size ?? 1,
    redisUrl, redisPrefix: c.redis?.key_prefix ?? 'tollgate:',
    limits: { defaultRpm: c.limits.default_rpm, defaultConcurrency: c.limits.default_concurrency, maxBodyBytes: c.limits.max_body_bytes,
      allowOverdraft: c.limits.allow_overdraft, overlapAdmission: c.limits.overlap_admission, spareHolds: c.limits.spare_holds,
      uploadBytes: c.limits.upload_bytes, routeUploadBytes: c.limits.route_upload_bytes, storageBytesPerAccount: c.limits.storage_bytes_per_account },
    voices: { maxPerAccount: c.voices.max_per_account, maxSamples: c.voices.max_samples, maxRequestBytes: c.voices.max_request_bytes },
    fileSweepMs: envInt(env, 'TOLLGATE_FILE_SWEEP_MS') ?? 60_000,
    upstreams, models, routing: { maxAttempts: c.routing.max_attempts },
    batches: {
      concurrency: c.batches.concurrency, leaseMs: envInt(env, 'TOLLGATE_BATCH_LEASE_MS') ?? c.batches.lease_ms,
      pollMs: envInt(env, 'TOLLGATE_BATCH_POLL_MS') ?? c.batches.poll_ms, maxFileBytes: c.batches.max_file_bytes,
    },
    realtime,
    demo: { credit: dollarsToNano(c.demo.credit), email: c.demo.email },
    payments: {
      provider, currency: p.currency, apiBase: p.api_base?.replace(/\/+$/, ''), returnOrigins,
      secretKey: p.secret_key_env ? env[p.secret_key_env] : undefined,
      // The sandbox signs its own events: a per-process secret unless one is configured.
      // (Workers share the primary's, so any of them verifies what another signed.)
      webhookSecret: p.webhook_secret_env ? env[p.webhook_secret_env]!
        : env[SANDBOX_SECRET_ENV] ?? `whsec_sandbox_${randomBytes(24).toString('hex')}`,
    },
    console: { secureCookies: c.console.secure_cookies ?? (c.public_url?.startsWith('https://') ?? false) },
    status: { lastReviewed: { ...c.status.last_reviewed }, probeMs: c.status.probe_ms },
    telemetry: { otlpEndpoint: c.telemetry.otlp_endpoint?.replace(/\/+$/, ''), serviceName: c.telemetry.service_name,
      headers: Object.fromEntries((c.telemetry.headers_env ? env[c.telemetry.headers_env] ?? '' : '').split(',').map((kv) => kv.split('=').map((x) => x.trim()))
        .filter((kv): kv is [string, string] => kv.length === 2 && kv[0]!.length > 0)) },
    embedded,
  };
  return deepFreeze(config);
}

/** A positive whole number from the environment (the batch worker's timing, for tests and operators), or undefined. */
function envInt(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const v = env[name];
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 10) throw new ConfigError(`environment variable ${name} must be a whole number of milliseconds (at least 10), got "${v}"`);
  return n;
}

/** Unit prices less a whole percentage, rounded down to a nanodollar per unit size (exact for prices in whole cents). */
function discounted(p: UnitPrices, percent: number): UnitPrices {
  if (percent === 0) return p;
  const k = BigInt(100 - percent);
  return {
    inputPerMTok: (p.inputPerMTok * k) / 100n, outputPerMTok: (p.outputPerMTok * k) / 100n, perMChar: (p.perMChar * k) / 100n,
    audioInPerMinute: (p.audioInPerMinute * k) / 100n, audioOutPerMinute: (p.audioOutPerMinute * k) / 100n,
    audioInputPerMTok: ((p.audioInputPerMTok ?? 0n) * k) / 100n, audioOutputPerMTok: ((p.audioOutputPerMTok ?? 0n) * k) / 100n,
    cachedInputPerMTok: ((p.cachedInputPerMTok ?? 0n) * k) / 100n,
  };
}

/** A model's pool from its `upstream` (a name or a list): each upstream named once and known, alike where the routes read one. */
function poolOf(m: RawConfig['models'][number], i: number, upstreams: ReadonlyMap<string, UpstreamConfig>, fail: (field: string, msg: string) => never): PoolEntry[] {
  const list = typeof m.upstream === 'string' ? [m.upstream] : m.upstream;
  const base = m.upstream_model ?? m.id;
  const pool = list.map((e): PoolEntry => (typeof e === 'string'
    ? { name: e, weight: 1, priority: 0, upstreamModel: base }
    : { name: e.name, weight: e.weight ?? 1, priority: e.priority ?? 0, upstreamModel: e.upstream_model ?? base }));
  const where = (j: number) => (typeof m.upstream === 'string' ? `/models/${i}/upstream` : `/models/${i}/upstream/${j}`);
  pool.forEach((e, j) => {
    if (!upstreams.has(e.name)) fail(where(j), `no upstream named "${e.name}"`);
    if (pool.findIndex((x) => x.name === e.name) !== j) fail(where(j), `upstream "${e.name}" is listed twice`);
  });
  // The routes read one upstream's protocol switches: every upstream of a pool must agree on them.
  const first = upstreams.get(pool[0]!.name)!;
  for (const [j, e] of pool.entries()) {
    const u = upstreams.get(e.name)!;
    for (const [f, field] of [['responsesApi', 'responses_api'], ['realtimeApi', 'realtime_api'], ['usagePerTask', 'usage_per_task'],
      ['promptProgress', 'prompt_progress'], ['continuousUsage', 'continuous_usage_stats (a sim upstream has it)'], ['protocol', 'protocol']] as const) {
      if (u[f] !== first[f]) fail(where(j), `upstream "${e.name}" differs from "${first.name}" in ${field}: a pool's upstreams must speak alike`);
    }
  }
  return pool;
}

function headerRules(list: string[]): { names: string[]; prefixes: string[] } {
  return { names: list.filter((h) => !h.endsWith('*')), prefixes: list.filter((h) => h.endsWith('*')).map((h) => h.slice(0, -1)) };
}

/** A model's unit prices; audio may be priced per minute or per second (not both), stored per minute. */
function unitPrices(m: RawConfig['models'][number], i: number, fail: (field: string, msg: string) => never, passthrough: boolean): UnitPrices {
  const d = (v: string | number | undefined) => (v === undefined ? 0n : dollarsToNano(v));
  const audio = (dir: 'in' | 'out') => {
    const perMinute = m[`audio_${dir}_per_minute`];
    const perSecond = m[`audio_${dir}_per_second`];
    if (perMinute !== undefined && perSecond !== undefined) fail(`/models/${i}/audio_${dir}_per_second`, `set audio_${dir}_per_minute or audio_${dir}_per_second, not both`);
    return perSecond !== undefined ? d(perSecond) * 60n : d(perMinute);
  };
  const p: UnitPrices = {
    inputPerMTok: d(m.input_per_mtok), outputPerMTok: d(m.output_per_mtok), perMChar: d(m.per_mchar),
    audioInPerMinute: audio('in'), audioOutPerMinute: audio('out'),
    // A pass-through's audio tokens have their own prices (required below); cached input defaults to the input price.
    audioInputPerMTok: d(m.audio_input_per_mtok), audioOutputPerMTok: d(m.audio_output_per_mtok),
    cachedInputPerMTok: m.cached_input_per_mtok === undefined ? d(m.input_per_mtok) : d(m.cached_input_per_mtok),
  };
  // A model must price the unit its kind is billed by, or every request would be free by mistake.
  const needs: Record<ModelKind, [keyof UnitPrices, string][]> = {
    chat: [['inputPerMTok', 'input_per_mtok'], ['outputPerMTok', 'output_per_mtok']],
    embedding: [['inputPerMTok', 'input_per_mtok']],
    tts: [['perMChar', 'per_mchar']],
    stt: [['audioInPerMinute', 'audio_in_per_minute']],
    sts: [['audioInPerMinute', 'audio_in_per_minute']],
    realtime: [['audioInPerMinute', 'audio_in_per_minute'], ['inputPerMTok', 'input_per_mtok'], ['outputPerMTok', 'output_per_mtok']],
  };
  // A pass-through is billed the upstream's tokens (text and audio), not the cascade's audio minutes.
  if (passthrough) {
    needs.realtime = [['inputPerMTok', 'input_per_mtok'], ['outputPerMTok', 'output_per_mtok'],
      ['audioInputPerMTok', 'audio_input_per_mtok'], ['audioOutputPerMTok', 'audio_output_per_mtok']];
  }
  const raw = m as Record<string, unknown>;
  for (const [field, name] of needs[m.kind]) {
    const given = raw[name] !== undefined || (field === 'audioInPerMinute' && raw.audio_in_per_second !== undefined);
    if (!given) fail(`/models/${i}/${name}`, `a ${m.kind} model needs ${name}${field === 'audioInPerMinute' ? ' (or audio_in_per_second)' : ''} (use "0" to make it free)`);
  }
  return p;
}

/** `https://host[:port]` when the text is exactly an origin (a trailing slash allowed), else null. */
function originOf(text: string): string | null {
  let u: URL;
  try { u = new URL(text); } catch { return null; }
  const bare = !u.username && !u.password && u.pathname === '/' && !u.search && !u.hash && !text.endsWith('?') && !text.endsWith('#');
  return bare && (u.protocol === 'https:' || u.protocol === 'http:') ? u.origin : null;
}

export function splitHostPort(text: string): [string, number] {
  const i = text.lastIndexOf(':');
  const port = Number(text.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError(`listen address must be HOST:PORT, got "${text}"`);
  return [text.slice(0, i).replace(/^\[|\]$/g, ''), port];
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !(o instanceof Map)) {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

/**
 * An upstream's base URL is its server's root: each request's path (`/v1/chat/completions`) goes after it. One
 * ending in `/v1`, as OpenAI's clients and LiteLLM's `api_base` are given, would send `/v1/v1/...`: every request
 * a 404. Refused at start, by name, rather than left to fail each request.
 */
function checkBaseUrl(url: string, fail: (msg: string) => never): void {
  let u: URL;
  try { u = new URL(url); } catch { fail(`${JSON.stringify(url)} is not a URL`); }
  if (/\/v1\/*$/.test(u.pathname)) {
    fail(`${JSON.stringify(url)} ends in /v1: give the server's root (${u.origin}${u.pathname.replace(/\/v1\/*$/, '')}); Tollgate adds /v1/... to each request's path`);
  }
}

/** The base URL clients are given: `public_url` when set, else the listen host and this port. */
export function baseUrlOf(config: Config, port: number): string {
  const host = config.listen.host.includes(':') ? `[${config.listen.host}]` : config.listen.host;
  return config.publicUrl ?? `http://${host}:${port}`;
}

// A key's per-minute usage limits as quota asks, and the rate-limit headers a response carries (OpenAI's x-ratelimit-*, the IETF RateLimit fields).
import type { Units } from '../ledger/pricing.js';
import type { KeyRecord } from '../store/keys.js';
import type { QuotaAsk, QuotaDim, QuotaState } from './limits/types.js';

/** The usage limits of a key, per minute: null is none. Audio is in seconds here, in milliseconds in the buckets. */
export interface UsageLimits { tpm: number | null; charsPerMin: number | null; audioSecsPerMin: number | null }

export function usageLimits(key: KeyRecord): UsageLimits {
  return { tpm: key.tpmLimit ?? null, charsPerMin: key.charsPerMinLimit ?? null, audioSecsPerMin: key.audioSecsPerMinLimit ?? null };
}

/** Whether any per-minute usage limit is set. */
export function hasUsageLimits(l: UsageLimits): boolean {
  return l.tpm !== null || l.charsPerMin !== null || l.audioSecsPerMin !== null;
}

/** How much of each dimension a usage (or a worst case) is: every token, the characters, the audio milliseconds. */
function amounts(u: Units): Record<QuotaDim, number> {
  return {
    t: u.inputTokens + u.outputTokens + (u.audioInputTokens ?? 0) + (u.audioOutputTokens ?? 0) + (u.cachedInputTokens ?? 0),
    c: u.characters,
    a: u.audioInMs + u.audioOutMs,
  };
}

/** The limits a request reserves under: each limit the key has, for which its worst case is above zero. */
export function quotaAsks(l: UsageLimits, worst: Units | undefined): QuotaAsk[] {
  if (!worst || !hasUsageLimits(l)) return [];
  const n = amounts(worst);
  const out: QuotaAsk[] = [];
  if (l.tpm !== null && n.t > 0) out.push({ dim: 't', limit: l.tpm, need: Math.ceil(n.t) });
  if (l.charsPerMin !== null && n.c > 0) out.push({ dim: 'c', limit: l.charsPerMin, need: Math.ceil(n.c) });
  if (l.audioSecsPerMin !== null && n.a > 0) out.push({ dim: 'a', limit: l.audioSecsPerMin * 1000, need: Math.ceil(n.a) });
  return out;
}

/** What a settled usage took under each limit of the key (those it used). */
export function quotaUse(l: UsageLimits, u: Units): QuotaAsk[] {
  const n = amounts(u);
  const out: QuotaAsk[] = [];
  if (l.tpm !== null && n.t > 0) out.push({ dim: 't', limit: l.tpm, need: Math.ceil(n.t) });
  if (l.charsPerMin !== null && n.c > 0) out.push({ dim: 'c', limit: l.charsPerMin, need: Math.ceil(n.c) });
  if (l.audioSecsPerMin !== null && n.a > 0) out.push({ dim: 'a', limit: l.audioSecsPerMin * 1000, need: Math.ceil(n.a) });
  return out;
}

/** The IETF policy names and quota units of each dimension ("tokens", "characters", "audio-seconds" are not in the draft's unit registry). */
const POLICY: Record<QuotaDim, { name: string; unit: string }> = {
  t: { name: 'tpm', unit: 'tokens' }, c: { name: 'characters-per-minute', unit: 'characters' }, a: { name: 'audio-seconds-per-minute', unit: 'audio-seconds' },
};

/** Go-style duration as in OpenAI's x-ratelimit-reset-* headers: "850ms", "1s", "6m0s". */
export function goDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`;
  const s = Math.ceil(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60}s`;
}

/** A quota as the client reads it: audio in seconds. */
function shown(q: QuotaState): { limit: number; remaining: number } {
  return q.dim === 'a' ? { limit: Math.round(q.limit / 1000), remaining: Math.floor(q.remaining / 1000) } : { limit: q.limit, remaining: q.remaining };
}

/**
 * The headers of a response: the requests trio (rpm), the tokens trio when a token limit applied to
 * the request, and the IETF `RateLimit-Policy` / `RateLimit` lists with one item per limit
 * (draft-ietf-httpapi-ratelimit-headers-11: `"name";q=<quota>;w=<window s>`, `"name";r=<left>;t=<s until full>`).
 */
export function rateHeaders(rpm: number, remaining: number, resetMs: number, quotas: readonly QuotaState[] = []): Record<string, string> {
  const h: Record<string, string> = {
    'x-ratelimit-limit-requests': String(rpm), 'x-ratelimit-remaining-requests': String(Math.max(0, remaining)),
    'x-ratelimit-reset-requests': goDuration(resetMs),
  };
  let policy = `"rpm";q=${rpm};w=60`;
  let state = `"rpm";r=${Math.max(0, remaining)};t=${Math.ceil(resetMs / 1000)}`;
  for (const q of quotas) {
    const s = shown(q);
    if (q.dim === 't') {
      h['x-ratelimit-limit-tokens'] = String(s.limit);
      h['x-ratelimit-remaining-tokens'] = String(s.remaining);
      h['x-ratelimit-reset-tokens'] = goDuration(q.resetMs);
    }
    policy += `, "${POLICY[q.dim].name}";q=${s.limit};qu="${POLICY[q.dim].unit}";w=60`;
    state += `, "${POLICY[q.dim].name}";r=${s.remaining};t=${Math.ceil(q.resetMs / 1000)}`;
  }
  h['ratelimit-policy'] = policy;
  h.ratelimit = state;
  return h;
}

/** A 429's wait: `Retry-After` in whole seconds (at least 1) and `retry-after-ms`, which the OpenAI clients read first. */
export function retryHeaders(retryMs: number): Record<string, string> {
  const ms = Math.max(1, Math.ceil(retryMs));
  return { 'retry-after': String(Math.max(1, Math.ceil(ms / 1000))), 'retry-after-ms': String(ms) };
}

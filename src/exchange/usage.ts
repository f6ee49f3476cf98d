// What a metered exchange consumed, in every unit Tollgate prices, and how it was known.

/**
 * - `exact`: reported by the upstream (its usage block) or measured by Tollgate from what it holds
 *   whole (characters of a text, seconds of an uploaded file).
 * - `estimated`: counted by Tollgate because the upstream reported nothing (token estimate).
 * - `partial`: a stream or session that broke or was dropped: the prompt plus what was produced.
 */
export type UsageBasis = 'exact' | 'estimated' | 'partial';

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  /** Part of outputTokens (billed as output; recorded for the user). */
  reasoningTokens: number;
  /** Characters sent for synthesis (text to speech). */
  characters: number;
  /** Audio taken in (transcription, speech to speech, realtime input), milliseconds. */
  audioInMs: number;
  /** Audio produced (realtime output), milliseconds. */
  audioOutMs: number;
  /**
   * A realtime upstream's tokens by modality (a pass-through's `response.done`), kept apart from
   * inputTokens and outputTokens, which then count the text (and image) tokens not cached.
   */
  audioInputTokens: number;
  audioOutputTokens: number;
  cachedInputTokens: number;
  basis: UsageBasis;
}

export type UsageInit = Partial<Omit<Usage, 'basis'>> & { basis: UsageBasis };

/** A usage with every unit it does not name at zero; counts are whole and never negative. */
export function usage(u: UsageInit): Usage {
  return {
    inputTokens: whole(u.inputTokens), outputTokens: whole(u.outputTokens), reasoningTokens: whole(u.reasoningTokens),
    characters: whole(u.characters), audioInMs: whole(u.audioInMs), audioOutMs: whole(u.audioOutMs),
    audioInputTokens: whole(u.audioInputTokens), audioOutputTokens: whole(u.audioOutputTokens), cachedInputTokens: whole(u.cachedInputTokens), basis: u.basis,
  };
}

export function isZero(u: Usage): boolean {
  return u.inputTokens === 0 && u.outputTokens === 0 && u.characters === 0 && u.audioInMs === 0 && u.audioOutMs === 0
    && u.audioInputTokens === 0 && u.audioOutputTokens === 0 && u.cachedInputTokens === 0;
}

/** The ledger's `usage` column: the units that are not zero, in the API's own names, and the basis. */
export function usageRecord(u: Usage, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const r: Record<string, unknown> = { input_tokens: u.inputTokens, output_tokens: u.outputTokens };
  if (u.reasoningTokens) r.reasoning_tokens = u.reasoningTokens;
  if (u.characters) r.characters = u.characters;
  if (u.audioInMs) r.audio_seconds_in = u.audioInMs / 1000;
  if (u.audioOutMs) r.audio_seconds_out = u.audioOutMs / 1000;
  if (u.audioInputTokens) r.audio_input_tokens = u.audioInputTokens;
  if (u.audioOutputTokens) r.audio_output_tokens = u.audioOutputTokens;
  if (u.cachedInputTokens) r.cached_input_tokens = u.cachedInputTokens;
  r.basis = u.basis;
  return Object.assign(r, extra);
}

/**
 * The units of `usageRecord` without the basis, as `x-tollgate-units` shows them
 * (`input_tokens=12,output_tokens=30`): the same names in the same order, written without the record.
 */
export function unitsText(u: Usage): string {
  let s = `input_tokens=${u.inputTokens},output_tokens=${u.outputTokens}`;
  if (u.reasoningTokens) s += `,reasoning_tokens=${u.reasoningTokens}`;
  if (u.characters) s += `,characters=${u.characters}`;
  if (u.audioInMs) s += `,audio_seconds_in=${u.audioInMs / 1000}`;
  if (u.audioOutMs) s += `,audio_seconds_out=${u.audioOutMs / 1000}`;
  if (u.audioInputTokens) s += `,audio_input_tokens=${u.audioInputTokens}`;
  if (u.audioOutputTokens) s += `,audio_output_tokens=${u.audioOutputTokens}`;
  if (u.cachedInputTokens) s += `,cached_input_tokens=${u.cachedInputTokens}`;
  return s;
}

function whole(n: number | undefined): number {
  return typeof n === 'number' && Number.isFinite(n) && n > 0 ? Math.floor(n) : 0;
}

// The family's premade voices (docs/elevenlabs.md, from resolve/voices.ts) in its VoiceResponseModel shape, and their upstream names.
import { PRESET_VOICES, presetVoice } from '../../resolve/voices.js';

/** The upstream voice of one of the family's premade voice ids; null for any other id. */
export function betaPreset(id: string): string | null {
  const v = presetVoice(id);
  return v && v.family === 'beta' ? v.upstreamVoice : null;
}

/**
 * The premade voices the official clients' own examples speak with (George in the Python and Node
 * READMEs, Rachel in older examples): listed first, so the first page of `GET /v2/voices` (10 by default) shows them.
 */
export const EXAMPLE_VOICES: readonly string[] = ['JBFqnCBsd6RMkjVDRZzb', '21m00Tcm4TlvDq8ikWAM'];

const rank = (id: string): number => { const i = EXAMPLE_VOICES.indexOf(id); return i < 0 ? EXAMPLE_VOICES.length : i; };

/** Premade voices as the family lists them (legacy ones only when asked), the clients' example voices first. */
export function presetViews(showLegacy: boolean, ttsModelIds: string[]): Record<string, unknown>[] {
  const listed = PRESET_VOICES.filter((v) => v.family === 'beta' && (showLegacy || !v.legacy));
  return [...listed].sort((a, b) => rank(a.id) - rank(b.id)).map((v) => ({
    voice_id: v.id, name: v.name, category: 'premade', labels: {}, description: null, samples: null, fine_tuning: null,
    preview_url: null, available_for_tiers: [], settings: null, sharing: null, high_quality_base_model_ids: ttsModelIds,
    verified_languages: [], safety_control: null, voice_verification: null, permission_on_resource: null, is_owner: false,
    is_legacy: v.legacy, is_mixed: false, created_at_unix: null,
  }));
}

// The family's premade voices (docs/elevenlabs.md, from resolve/voices.ts) in its VoiceResponseModel shape, and their upstream names.
import { PRESET_VOICES, presetVoice } from '../../resolve/voices.js';

/** The upstream voice of one of the family's premade voice ids; null for any other id. */
export function betaPreset(id: string): string | null {
  const v = presetVoice(id);
  return v && v.family === 'beta' ? v.upstreamVoice : null;
}

/** Premade voices as the family lists them (legacy ones only when asked). */
export function presetViews(showLegacy: boolean, ttsModelIds: string[]): Record<string, unknown>[] {
  return PRESET_VOICES.filter((v) => v.family === 'beta' && (showLegacy || !v.legacy)).map((v) => ({
    voice_id: v.id, name: v.name, category: 'premade', labels: {}, description: null, samples: null, fine_tuning: null,
    preview_url: null, available_for_tiers: [], settings: null, sharing: null, high_quality_base_model_ids: ttsModelIds,
    verified_languages: [], safety_control: null, voice_verification: null, permission_on_resource: null, is_owner: false,
    is_legacy: v.legacy, is_mixed: false, created_at_unix: null,
  }));
}

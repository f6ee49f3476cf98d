// The family's JSON shapes built from Tollgate's records: VoiceResponseModel, SampleResponseModel, ModelResponseModel.
import type { VoiceRecord, SampleRecord } from '../../store/voices.js';
import type { ModelConfig } from '../../config.js';
import { publishedPricing } from '../../ledger/published.js';

/** The longest text one synthesis request may carry (characters): what /v1/models reports and TTS enforces. */
export const MAX_TTS_CHARACTERS = 10_000;

export function sampleView(s: SampleRecord): Record<string, unknown> {
  return { sample_id: s.id, file_name: s.fileName, mime_type: s.mimeType, size_bytes: s.sizeBytes, hash: s.hash,
    duration_secs: s.durationSecs, remove_background_noise: false, has_isolated_audio: false, has_isolated_audio_preview: false };
}

/** A cloned voice as its owner sees it. */
export function clonedVoiceView(v: VoiceRecord): Record<string, unknown> {
  return {
    voice_id: v.id, name: v.name, category: 'cloned', labels: v.labels, description: v.description,
    samples: v.samples.map(sampleView), fine_tuning: null, preview_url: null, available_for_tiers: [],
    settings: null, sharing: null, high_quality_base_model_ids: [v.modelId], verified_languages: [],
    safety_control: null, voice_verification: null, permission_on_resource: 'admin', is_owner: true,
    is_legacy: false, is_mixed: false, created_at_unix: Math.floor(v.createdAt.getTime() / 1000),
  };
}

/** A configured speech model in the family's ModelResponseModel shape. */
export function modelView(m: ModelConfig): Record<string, unknown> {
  return {
    model_id: m.id, name: m.id, description: m.description ?? '',
    can_be_finetuned: false, can_do_text_to_speech: m.kind === 'tts', can_do_voice_conversion: m.kind === 'sts',
    can_use_style: false, can_use_speaker_boost: false, serves_pro_voices: false, token_cost_factor: 1,
    requires_alpha_access: false,
    max_characters_request_free_user: MAX_TTS_CHARACTERS, max_characters_request_subscribed_user: MAX_TTS_CHARACTERS,
    maximum_text_length_per_request: MAX_TTS_CHARACTERS,
    languages: [{ language_id: 'en', name: 'English' }],
    model_rates: { character_cost_multiplier: 1 },
    concurrency_group: 'standard',
    // Tollgate's own: what the ledger charges (a tts model per 1M characters, a sts model per audio minute in).
    pricing: publishedPricing(m),
  };
}

-- Per-key usage limits beside rpm and concurrency (issue 27): tokens per minute for text, characters
-- per minute for speech synthesis, audio seconds per minute for transcription and speech to speech.
-- NULL: no limit (as before).
ALTER TABLE api_keys ADD COLUMN tpm_limit integer CHECK (tpm_limit > 0);
ALTER TABLE api_keys ADD COLUMN chars_per_min_limit integer CHECK (chars_per_min_limit > 0);
ALTER TABLE api_keys ADD COLUMN audio_secs_per_min_limit integer CHECK (audio_secs_per_min_limit > 0);

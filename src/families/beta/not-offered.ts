// The beta routes of covered groups (speech to text, voices and samples) that Tollgate does not offer, with why.
import type { NotOffered } from '../not-offered.js';

const PVC = 'professional voice cloning is not offered; clone a voice instantly with `POST /v1/voices/add`.';
const SHARED = 'the shared voice library is not offered: the voices here are the premade ones and those your account cloned.';
const COLLECTIONS = 'voice collections are not offered; `GET /v2/voices` lists and searches your voices.';
const SETTINGS = 'stored voice settings are not offered: send `voice_settings` with each text-to-speech request.';
const TRANSCRIPTS = 'Tollgate does not keep transcripts: each one is in the answer to `POST /v1/speech-to-text`, and nothing is stored to read or delete.';

export const BETA_NOT_OFFERED: readonly NotOffered[] = [
  { method: 'GET', path: '/v1/speech-to-text/transcripts/:transcription_id', reason: TRANSCRIPTS },
  { method: 'DELETE', path: '/v1/speech-to-text/transcripts/:transcription_id', reason: TRANSCRIPTS },
  { method: 'POST', path: '/v1/voices/pvc', reason: PVC },
  { method: 'POST', path: '/v1/voices/pvc/:voice_id', reason: PVC },
  { method: 'POST', path: '/v1/voices/pvc/:voice_id/train', reason: PVC },
  { method: 'POST', path: '/v1/voices/pvc/:voice_id/samples', reason: PVC },
  { method: 'POST', path: '/v1/voices/pvc/:voice_id/samples/:sample_id', reason: PVC },
  { method: 'DELETE', path: '/v1/voices/pvc/:voice_id/samples/:sample_id', reason: PVC },
  { method: 'GET', path: '/v1/voices/pvc/:voice_id/samples/:sample_id/audio', reason: PVC },
  { method: 'GET', path: '/v1/voices/pvc/:voice_id/samples/:sample_id/waveform', reason: PVC },
  { method: 'GET', path: '/v1/voices/pvc/:voice_id/samples/:sample_id/speakers', reason: PVC },
  { method: 'POST', path: '/v1/voices/pvc/:voice_id/samples/:sample_id/separate-speakers', reason: PVC },
  { method: 'GET', path: '/v1/voices/pvc/:voice_id/samples/:sample_id/speakers/:speaker_id/audio', reason: PVC },
  { method: 'GET', path: '/v1/voices/pvc/:voice_id/captcha', reason: PVC },
  { method: 'POST', path: '/v1/voices/pvc/:voice_id/captcha', reason: PVC },
  { method: 'POST', path: '/v1/voices/pvc/:voice_id/verification', reason: PVC },
  { method: 'GET', path: '/v1/shared-voices', reason: SHARED },
  { method: 'POST', path: '/v1/voices/add/:public_user_id/:voice_id', reason: SHARED },
  { method: 'POST', path: '/v1/similar-voices', reason: SHARED },
  { method: 'GET', path: '/v1/voices/collections', reason: COLLECTIONS },
  { method: 'POST', path: '/v1/voices/collections', reason: COLLECTIONS },
  { method: 'GET', path: '/v1/voices/collections/:collection_id', reason: COLLECTIONS },
  { method: 'PATCH', path: '/v1/voices/collections/:collection_id', reason: COLLECTIONS },
  { method: 'DELETE', path: '/v1/voices/collections/:collection_id', reason: COLLECTIONS },
  { method: 'POST', path: '/v1/voices/collections/:collection_id/voice/:voice_id', reason: COLLECTIONS },
  { method: 'DELETE', path: '/v1/voices/collections/:collection_id/voice/:voice_id', reason: COLLECTIONS },
  { method: 'GET', path: '/v1/voices/accents', reason: 'the accent catalogue of the shared voice library is not offered; a cloned voice keeps the `labels` you give it.' },
  { method: 'GET', path: '/v1/voices/settings/default', reason: SETTINGS },
  { method: 'GET', path: '/v1/voices/:voice_id/settings', reason: SETTINGS },
  { method: 'POST', path: '/v1/voices/:voice_id/settings/edit', reason: SETTINGS },
  { method: 'POST', path: '/v1/voices/:voice_id/edit', reason: 'editing a voice (name, labels, samples) is not offered; delete it and add it again with `POST /v1/voices/add` (adding is free).' },
  { method: 'POST', path: '/v1/voices/:voice_id/replicate-to-isolated-environment', reason: 'isolated environments are not offered.' },
];

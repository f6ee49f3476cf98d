// The alpha routes of covered groups (chat, responses, audio, models, realtime) that Tollgate does not offer, with why.
import type { NotOffered } from '../not-offered.js';

const STORED_CHAT = 'Tollgate does not store chat completions (`store` is passed to the upstream; nothing is kept here to list, read, update or delete).';
const STORED_RESPONSES = 'Tollgate does not store responses (no `previous_response_id`, no background responses): each response is answered and billed as it is made.';
const OPENAI_VOICES = 'custom OpenAI voices need OpenAI\'s consent recordings; clone a voice with `POST /beta/v1/voices/add` and pass its id as `voice` to `/v1/audio/speech`.';
const CALLS = 'realtime calls over SIP or WebRTC are not offered; open a realtime session over the WebSocket at `/v1/realtime`.';

export const ALPHA_NOT_OFFERED: readonly NotOffered[] = [
  { method: 'GET', path: '/v1/chat/completions', reason: STORED_CHAT },
  { method: 'GET', path: '/v1/chat/completions/:completion_id', reason: STORED_CHAT },
  { method: 'POST', path: '/v1/chat/completions/:completion_id', reason: STORED_CHAT },
  { method: 'DELETE', path: '/v1/chat/completions/:completion_id', reason: STORED_CHAT },
  { method: 'GET', path: '/v1/chat/completions/:completion_id/messages', reason: STORED_CHAT },
  { method: 'GET', path: '/v1/responses/:response_id', reason: STORED_RESPONSES },
  { method: 'DELETE', path: '/v1/responses/:response_id', reason: STORED_RESPONSES },
  { method: 'POST', path: '/v1/responses/:response_id/cancel', reason: STORED_RESPONSES },
  { method: 'GET', path: '/v1/responses/:response_id/input_items', reason: STORED_RESPONSES },
  { method: 'POST', path: '/v1/responses/compact', reason: STORED_RESPONSES },
  { method: 'POST', path: '/v1/responses/input_tokens', reason: 'counting a request\'s input tokens without running it is not offered; the usage of every response reports them.' },
  { method: 'POST', path: '/v1/audio/voices', reason: OPENAI_VOICES },
  { method: 'DELETE', path: '/v1/audio/voices/:voice_id', reason: OPENAI_VOICES },
  { method: 'GET', path: '/v1/audio/voice_consents', reason: OPENAI_VOICES },
  { method: 'POST', path: '/v1/audio/voice_consents', reason: OPENAI_VOICES },
  { method: 'GET', path: '/v1/audio/voice_consents/:consent_id', reason: OPENAI_VOICES },
  { method: 'POST', path: '/v1/audio/voice_consents/:consent_id', reason: OPENAI_VOICES },
  { method: 'DELETE', path: '/v1/audio/voice_consents/:consent_id', reason: OPENAI_VOICES },
  { method: 'DELETE', path: '/v1/models/:model', reason: 'there is no fine-tuning here, so no fine-tuned model of yours to delete; the models are the gateway\'s.' },
  { method: 'POST', path: '/v1/realtime/calls', reason: CALLS },
  { method: 'POST', path: '/v1/realtime/calls/:call_id/accept', reason: CALLS },
  { method: 'POST', path: '/v1/realtime/calls/:call_id/hangup', reason: CALLS },
  { method: 'POST', path: '/v1/realtime/calls/:call_id/refer', reason: CALLS },
  { method: 'POST', path: '/v1/realtime/calls/:call_id/reject', reason: CALLS },
  { method: 'POST', path: '/v1/realtime/transcription_sessions', reason: 'transcription-only realtime sessions are not offered; a realtime session with `audio.input.transcription` transcribes what it hears.' },
  { method: 'POST', path: '/v1/realtime/translations/client_secrets', reason: 'realtime translation sessions are not offered.' },
];

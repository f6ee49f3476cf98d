// The beta family: the ElevenLabs API shape under /beta, with its FastAPI-style `detail` envelope.
import type { Family } from '../family.js';
import { openAiUpstreamError } from '../upstream-error.js';

export const beta: Family = {
  name: 'beta',
  prefixes: ['/beta'],
  render(err, requestId) {
    // ElevenLabs clients read FastAPI-style bodies; 422 carries the validation list as `detail`.
    if (err.status === 422 && err.detail) return JSON.stringify({ detail: err.detail });
    return JSON.stringify({ detail: { status: err.code, code: err.code, type: err.type, message: err.message, request_id: requestId } });
  },
  // The speech upstreams speak the OpenAI-compatible protocol too.
  upstreamError: openAiUpstreamError,
};

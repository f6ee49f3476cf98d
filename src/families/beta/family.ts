// The beta family: the ElevenLabs API shape under /beta, with its FastAPI-style `detail` envelope.
import type { Family } from '../family.js';
import { closeCode, type GatewayError } from '../../errors.js';
import { upstreamError } from '../upstream-error.js';

/** The specification's envelope, carried in the same body so that a client reading either finds the error. */
function errorObject(err: GatewayError): Record<string, unknown> {
  return { code: err.code, message: err.message, type: err.type, param: err.param };
}

export const beta: Family = {
  name: 'beta',
  prefixes: ['/beta'],
  render(err, requestId) {
    // ElevenLabs clients read FastAPI-style bodies; a 422 carries the validation list as `detail`.
    if (err.status === 422 && err.detail) return JSON.stringify({ detail: err.detail, error: errorObject(err) });
    return JSON.stringify({
      detail: { status: err.code, message: err.message, code: err.code, type: err.type, request_id: requestId },
      error: errorObject(err),
    });
  },
  // The speech upstreams speak the OpenAI-compatible protocol or ElevenLabs' own: one reading of both (upstream-error.ts).
  upstreamError,
  // ElevenLabs' WebSocket error message (`{message, error, code}`, code being the close code), then the close with the error's code as its reason.
  renderSocket(err) {
    const close = closeCode(err);
    return { frame: JSON.stringify({ message: err.message, error: err.code, code: close }), close, reason: err.code };
  },
};

// The alpha family: the OpenAI API shape under /alpha/v1 (and /v1), with OpenAI's error envelope.
import type { Family } from '../family.js';
import { closeCode } from '../../errors.js';
import { base62 } from '../../store/ids.js';
import { upstreamError } from '../upstream-error.js';

export const alpha: Family = {
  name: 'alpha',
  prefixes: ['/alpha', ''],
  render(err) {
    const body: Record<string, unknown> = { error: { message: err.message, type: err.type, param: err.param, code: err.code } };
    if (err.detail) body.detail = err.detail;
    return JSON.stringify(body);
  },
  upstreamError,
  // The Realtime API's `error` server event, then the close with the error's code as its reason.
  // `replyTo`: the client event the error answers (its event_id), when there is one.
  renderSocket(err, _requestId, replyTo = null) {
    const frame = { event_id: `event_${base62(16)}`, type: 'error', error: { type: err.type, code: err.code, message: err.message, param: err.param, event_id: replyTo } };
    return { frame: JSON.stringify(frame), close: closeCode(err), reason: err.code };
  },
};

// The alpha family: the OpenAI API shape under /alpha/v1 (and /v1), with OpenAI's error envelope.
import type { Family } from '../family.js';
import { openAiUpstreamError } from '../upstream-error.js';

export const alpha: Family = {
  name: 'alpha',
  prefixes: ['/alpha', ''],
  render(err) {
    const body: Record<string, unknown> = { error: { message: err.message, type: err.type, param: err.param, code: err.code } };
    if (err.detail) body.detail = err.detail;
    return JSON.stringify(body);
  },
  upstreamError: openAiUpstreamError,
};

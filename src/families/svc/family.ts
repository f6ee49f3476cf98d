// The svc family: Tollgate's own routes under /svc (key inspection, billing), in the OpenAI-style envelope its clients already parse.
import type { Family } from '../family.js';
import { alpha } from '../alpha/family.js';

export const svc: Family = {
  name: 'svc',
  prefixes: ['/svc'],
  render: alpha.render,
  upstreamError: alpha.upstreamError,
  renderSocket: alpha.renderSocket,
};

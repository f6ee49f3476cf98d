// Every route the gateway serves, mounted by family; the only routes without a key are the `public` ones.
import type { Services } from './services.js';
import type { Mount, Route } from './server/router.js';
import { alpha } from './families/alpha/family.js';
import { beta } from './families/beta/family.js';
import { svc } from './families/svc/family.js';
import { chatRoutes } from './families/alpha/chat.js';
import { modelRoutes } from './families/alpha/models.js';
import { completionRoutes } from './families/alpha/completions.js';
import { responsesRoutes } from './families/alpha/responses.js';
import { keyRoutes } from './families/svc/key.js';
import { billingRoutes } from './families/svc/billing.js';
import { consoleRoutes } from './console/routes.js';

export function mounts(s: Services): Mount[] {
  const ops: Route[] = [
    { method: 'GET', path: '/health', name: 'health', scope: 'public', handler: async (ctx) => ctx.json(200, { status: 'ok' }) },
    { method: 'GET', path: '/metrics', name: 'metrics', scope: 'public',
      handler: async (ctx) => ctx.send(200, s.metrics.render(), {}, 'text/plain; version=0.0.4') },
  ];
  return [
    { family: alpha, routes: [...chatRoutes(s), ...completionRoutes(s), ...responsesRoutes(s), ...modelRoutes(s)] },
    // Not served yet: its paths answer 404 in its own envelope.
    { family: beta, routes: [] },
    { family: svc, routes: [...keyRoutes(s), ...billingRoutes(s)] },
    // The console renders its own errors as pages; health and metrics need no envelope of a family.
    { family: svc, routes: [...ops, ...consoleRoutes(s)], prefixes: [''] },
  ];
}

/** The envelope of an error on a path no family claims. */
export const fallbackFamily = alpha;

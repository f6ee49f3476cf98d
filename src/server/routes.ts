// Every route the gateway serves, by family; the only routes without a key are the `public` ones here.
import type { Services, Gateway } from './app.js';
import type { Route } from './router.js';
import { chatRoutes } from '../families/alpha/chat.js';
import { modelRoutes } from '../families/alpha/models.js';
import { completionRoutes } from '../families/alpha/completions.js';
import { responsesRoutes } from '../families/alpha/responses.js';
import { keyRoutes } from '../families/svc/key.js';
import { billingRoutes } from '../families/svc/billing.js';
import { consoleRoutes } from '../console/routes.js';

export function routes(s: Services, _g: Gateway): Route[] {
  const publicRoutes: Route[] = [
    { method: 'GET', path: '/health', name: 'health', scope: 'public', handler: async (ctx) => ctx.json(200, { status: 'ok' }) },
    { method: 'GET', path: '/metrics', name: 'metrics', scope: 'public',
      handler: async (ctx) => ctx.send(200, s.metrics.render(), {}, 'text/plain; version=0.0.4') },
  ];
  return [...publicRoutes, ...chatRoutes(s), ...completionRoutes(s), ...responsesRoutes(s), ...modelRoutes(s), ...keyRoutes(s), ...billingRoutes(s), ...consoleRoutes(s)];
}

// GET /alpha/v1/models and /alpha/v1/models/{model}: the configured models in OpenAI's list shape.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { ModelConfig } from '../../config.js';
import { publishedPricing } from '../../ledger/published.js';

const CREATED = 1_767_225_600; // 2026-01-01: a fixed date, so listings are stable

function view(m: ModelConfig): Record<string, unknown> {
  return {
    id: m.id, object: 'model', created: CREATED, owned_by: m.simulated ? 'tollgate-sim' : 'tollgate',
    ...(m.simulated ? { simulated: true, description: m.description ?? 'Simulated model (test infrastructure)' } : m.description ? { description: m.description } : {}),
    pricing: publishedPricing(m),
  };
}

export function modelRoutes(s: Services): Route[] {
  return [
    { method: 'GET', path: '/v1/models', name: 'models.list', scope: 'any',
      handler: async (ctx) => ctx.json(200, { object: 'list', data: s.models.models.map(view) }) },
    { method: 'GET', path: '/v1/models/:model', name: 'models.retrieve', scope: 'any',
      handler: async (ctx, { params }) => ctx.json(200, view(s.models.resolve(params.model!))) },
  ];
}

// POST /alpha/v1/completions (legacy text completions) and POST /alpha/v1/embeddings: metered pass-through.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import { choicesTokens, promptTokens } from '../../meter/tokens.js';
import { parseJson } from '../validate.js';
import { checkCompletion, checkEmbedding } from './schemas.js';
import { textExchange, type ExchangeClient } from './metered.js';
import { fallbackPlan, tryInOrder } from './fallback.js';

export function completionRoutes(s: Services): Route[] {
  return [
    {
      method: 'POST', path: '/v1/completions', name: 'completions', scope: 'llm', metered: true,
      handler: (ctx, { body }) => completion(s, ctx, body),
    },
    {
      method: 'POST', path: '/v1/embeddings', name: 'embeddings', scope: 'llm', metered: true,
      handler: (ctx, { body }) => embedding(s, ctx, body),
    },
  ];
}

/** One legacy completion, from a live request or a batch line; `models` (or the key's opt-in) as for chat. */
export async function completion(s: Services, ctx: ExchangeClient, body: Buffer | null): Promise<void> {
  const req = parseJson(checkCompletion, body, ctx.headers['content-type']);
  const plan = fallbackPlan(s, ctx.key, req, body!, 'chat', ['max_tokens']);
  const prompts = Array.isArray(req.prompt) && (typeof req.prompt[0] === 'string' || Array.isArray(req.prompt[0])) ? req.prompt.length : 1;
  return tryInOrder(ctx, plan.chain, (model, fallback) => {
    const perChoice = Math.min(req.max_tokens ?? 16, model.maxOutputTokens);
    return textExchange(s, ctx, {
      model, body: plan.body, parsed: plan.req, upstreamPath: '/v1/completions',
      maxOutputTokens: perChoice * Math.max(req.n ?? 1, req.best_of ?? 1) * prompts, tasks: (req.n ?? 1) * prompts,
      bounded: req.max_tokens != null, fallback,
      promptTokens: () => promptTokens(req.prompt),
      outputTokens: completionOutputTokens,
    });
  });
}

/** Output tokens counted from a completion that carried no usage. At module level: a closure made in the handler would keep the request alive as long as the reply. */
const completionOutputTokens = (json: Record<string, unknown>): number => choicesTokens(json, (c) => c.text);
const noOutputTokens = (): number => 0;

/** One embeddings request, from a live request or a batch line. */
export async function embedding(s: Services, ctx: ExchangeClient, body: Buffer | null): Promise<void> {
  const req = parseJson(checkEmbedding, body, ctx.headers['content-type']);
  const model = s.models.resolve(req.model, 'embedding');
  return textExchange(s, ctx, {
    model, body: body!, parsed: req, upstreamPath: '/v1/embeddings', maxOutputTokens: 0,
    promptTokens: () => promptTokens(req.input), outputTokens: noOutputTokens,
  });
}

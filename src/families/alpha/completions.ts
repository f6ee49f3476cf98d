// POST /alpha/v1/completions (legacy text completions) and POST /alpha/v1/embeddings: metered pass-through.
import type { Services } from '../../server/app.js';
import type { Route } from '../../server/router.js';
import { countTokens } from '../../sim/index.js';
import { parseJson } from '../validate.js';
import { checkCompletion, checkEmbedding } from './schemas.js';
import { metered } from './metered.js';
import { choicesText } from './chat.js';

function promptTokens(p: string | string[] | number[] | number[][]): number {
  if (typeof p === 'string') return countTokens(p);
  let n = 0;
  for (const x of p) n += typeof x === 'string' ? countTokens(x) : Array.isArray(x) ? x.length : 1;
  return n;
}

export function completionRoutes(s: Services): Route[] {
  return [
    {
      method: 'POST', path: '/alpha/v1/completions', name: 'completions', scope: 'llm',
      handler: async (ctx, { body }) => {
        const req = parseJson(checkCompletion, body);
        const model = s.models.resolve(req.model, 'chat');
        const prompts = Array.isArray(req.prompt) && (typeof req.prompt[0] === 'string' || Array.isArray(req.prompt[0])) ? req.prompt.length : 1;
        const perChoice = Math.min(req.max_tokens ?? 16, model.maxOutputTokens);
        await metered(s, ctx, {
          model, body: body!, parsed: req, upstreamPath: '/v1/completions',
          maxOutputTokens: perChoice * Math.max(req.n ?? 1, req.best_of ?? 1) * prompts,
          promptEstimate: () => promptTokens(req.prompt),
          outputEstimate: (json) => choicesText(json, (c) => c.text),
        });
      },
    },
    {
      method: 'POST', path: '/alpha/v1/embeddings', name: 'embeddings', scope: 'llm',
      handler: async (ctx, { body }) => {
        const req = parseJson(checkEmbedding, body);
        const model = s.models.resolve(req.model, 'embedding');
        await metered(s, ctx, {
          model, body: body!, parsed: req, upstreamPath: '/v1/embeddings', maxOutputTokens: 0,
          promptEstimate: () => promptTokens(req.input), outputEstimate: () => 0,
        });
      },
    },
  ];
}

// POST /alpha/v1/chat/completions: the schema, the parameters we refuse, and the metered pass-through.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import { chatPromptTokens, choicesTokens } from '../../meter/tokens.js';
import { checkMetadata, unsupported, parseJson, rejectAsked } from '../validate.js';
import { checkChat, CHAT_REJECTED } from './schemas.js';
import { textExchange, type ExchangeClient } from './metered.js';
import { fallbackPlan, tryInOrder } from './fallback.js';

export function chatRoutes(s: Services): Route[] {
  return [{
    method: 'POST', path: '/v1/chat/completions', name: 'chat.completions', scope: 'llm', metered: true,
    handler: (ctx, { body }) => chatCompletion(s, ctx, body),
  }];
}

/** One chat completion, from a live request or a batch line: validated, refused parameters, metered. */
export async function chatCompletion(s: Services, ctx: ExchangeClient, body: Buffer | null): Promise<void> {
  const req = parseJson(checkChat, body, ctx.headers['content-type']);
  checkMetadata((req as Record<string, unknown>).metadata);
  rejectChatParams(req);
  // `models` (OpenRouter's fallback list), or a key's opt-in: the models tried after `model`, in order; never sent upstream.
  const plan = fallbackPlan(s, ctx.key, req, body!, 'chat', ['max_completion_tokens', 'max_tokens']);
  return tryInOrder(ctx, plan.chain, (model, fallback) => {
    const maxOut = req.max_completion_tokens ?? req.max_tokens ?? model.maxOutputTokens;
    return textExchange(s, ctx, {
      model, body: plan.body, parsed: plan.req, upstreamPath: '/v1/chat/completions', maxOutputTokens: maxOut * (req.n ?? 1), tasks: req.n ?? 1,
      bounded: (req.max_completion_tokens ?? req.max_tokens) != null, fallback,
      promptTokens: () => chatPromptTokens(req.messages),
      outputTokens: chatOutputTokens,
    });
  });
}

/** Output tokens counted from a chat reply that carried no usage. At module level: a closure made in the handler would keep the request alive as long as the reply. */
export const chatOutputTokens = (json: Record<string, unknown>): number => choicesTokens(json, (c) => (c.message as { content?: unknown } | undefined)?.content);

export function rejectChatParams(req: Record<string, unknown>): void {
  rejectAsked(req, CHAT_REJECTED);
  const mod = req.modalities;
  if (mod !== undefined && mod !== null && !(Array.isArray(mod) && mod.length === 1 && mod[0] === 'text')) {
    throw unsupported('modalities', 'only ["text"] output is available');
  }
}

// POST /alpha/v1/chat/completions: the schema, the parameters we refuse, and the metered pass-through.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import { chatPromptTokens, choicesTokens } from '../../meter/tokens.js';
import { atMostOutput, checkMetadata, unsupported, parseJson, rejectAsked } from '../validate.js';
import { checkChat, CHAT_REJECTED } from './schemas.js';
import { textExchange, type ExchangeClient } from './metered.js';
import type { ModelConfig } from '../../config.js';
import { GatewayError } from '../../errors.js';
import { wasUndone } from '../../proxy/routed.js';

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
  // `models` (OpenRouter's fallback list): the models tried after `model`, in order; never sent upstream.
  const chain = fallbackChain(s, req);
  const sent = chain.length > 1 ? Buffer.from(JSON.stringify(withoutModels(req))) : body!;
  const parsed = chain.length > 1 ? withoutModels(req) : req;
  for (const model of chain) atMostOutput(req, ['max_completion_tokens', 'max_tokens'], model);
  for (const [i, model] of chain.entries()) {
    const maxOut = req.max_completion_tokens ?? req.max_tokens ?? model.maxOutputTokens;
    try {
      await textExchange(s, ctx, {
        model, body: sent, parsed, upstreamPath: '/v1/chat/completions', maxOutputTokens: maxOut * (req.n ?? 1), tasks: req.n ?? 1,
        bounded: (req.max_completion_tokens ?? req.max_tokens) != null,
        promptTokens: () => chatPromptTokens(req.messages),
        outputTokens: (json) => choicesTokens(json, (c) => (c.message as { content?: unknown } | undefined)?.content),
      });
      return;
    } catch (e) {
      // The next model only when no upstream of this one can have done the work (nothing billed, nothing sent).
      if (i === chain.length - 1 || !wasUndone(e) || ctx.aborted) throw e;
    }
  }
}

const MAX_FALLBACKS = 8;

/** `model`, then each model of `models` not already listed: every one a chat model (404 naming `models` otherwise). */
function fallbackChain(s: Services, req: Record<string, unknown> & { model: string }): ModelConfig[] {
  const first = s.models.resolve(req.model, 'chat');
  const list = req.models;
  if (list === undefined || list === null) return [first];
  if (!Array.isArray(list) || list.length > MAX_FALLBACKS || !list.every((m) => typeof m === 'string' && m.length > 0)) {
    throw new GatewayError({ status: 400, code: 'invalid_value', param: 'models', message: `\`models\` must be a list of at most ${MAX_FALLBACKS} model ids, tried in order after \`model\` when its upstreams cannot serve it.` });
  }
  const chain = [first];
  for (const name of list as string[]) {
    let m: ModelConfig;
    try { m = s.models.resolve(name, 'chat'); } catch (e) {
      throw new GatewayError({ status: 404, code: 'model_not_found', param: 'models', message: (e as Error).message });
    }
    if (!chain.includes(m)) chain.push(m);
  }
  return chain;
}

function withoutModels<T extends Record<string, unknown>>(req: T): T {
  const out = { ...req };
  delete out.models;
  return out;
}

export function rejectChatParams(req: Record<string, unknown>): void {
  rejectAsked(req, CHAT_REJECTED);
  const mod = req.modalities;
  if (mod !== undefined && mod !== null && !(Array.isArray(mod) && mod.length === 1 && mod[0] === 'text')) {
    throw unsupported('modalities', 'only ["text"] output is available');
  }
}

// Opt-in fallback to other models (issue 27) for chat, completions and responses: the chain a request may be tried on, and the loop that tries it.
import type { Services } from '../../services.js';
import type { ModelConfig } from '../../config.js';
import type { KeyRecord } from '../../store/keys.js';
import type { ExchangeClient, FallbackNote } from './metered.js';
import { GatewayError } from '../../errors.js';
import { wasUndone } from '../../proxy/routed.js';
import { atMostOutput } from '../validate.js';

/** The most models a body's `models` list may name. */
export const MAX_FALLBACKS = 8;

/** A request's models in the order they may be tried, and the request as the upstream may see it (no `models`). */
export interface FallbackPlan<T extends Record<string, unknown>> {
  chain: ModelConfig[];
  req: T;
  body: Buffer;
}

/**
 * The models a request may be tried on: `model`, then the body's `models` (OpenRouter's fallback list)
 * when it has one, else — only for a key that opted in (`fallback`) — the model's configured `fallbacks`.
 * Every listed model must be of `kind` (404 naming `models` otherwise) and take the output the request
 * asks for in `maxFields` (400 naming the field); a configured fallback that cannot is left out.
 * `models` is never sent upstream: `req` and `body` come back without it.
 */
export function fallbackPlan<T extends Record<string, unknown> & { model: string }>(s: Services, key: KeyRecord | null, req: T, body: Buffer, kind: ModelConfig['kind'], maxFields: readonly string[]): FallbackPlan<T> {
  const first = s.models.resolve(req.model, kind);
  atMostOutput(req, maxFields, first);
  const list = req.models;
  const sent = list === undefined ? { req, body } : { req: withoutModels(req), body: Buffer.from(JSON.stringify(withoutModels(req))) };
  if (list === undefined || list === null) {
    // Configured fallbacks change what the user gets: only a key that opted in takes them.
    const chain = [first];
    if (key?.fallback === true) for (const id of first.fallbacks) { const m = s.models.resolve(id, kind); if (fits(req, maxFields, m)) chain.push(m); }
    return { chain, ...sent };
  }
  if (!Array.isArray(list) || list.length > MAX_FALLBACKS || !list.every((m) => typeof m === 'string' && m.length > 0)) {
    throw new GatewayError({ status: 400, code: 'invalid_value', param: 'models', message: `\`models\` must be a list of at most ${MAX_FALLBACKS} model ids, tried in order after \`model\` when its upstreams cannot serve it.` });
  }
  const chain = [first];
  for (const name of list as string[]) {
    let m: ModelConfig;
    try { m = s.models.resolve(name, kind); } catch (e) {
      throw new GatewayError({ status: 404, code: 'model_not_found', param: 'models', message: (e as Error).message });
    }
    atMostOutput(req, maxFields, m);
    if (!chain.includes(m)) chain.push(m);
  }
  return { chain, ...sent };
}

function fits(req: Record<string, unknown>, maxFields: readonly string[], m: ModelConfig): boolean {
  return maxFields.every((f) => typeof req[f] !== 'number' || (req[f] as number) <= m.maxOutputTokens);
}

function withoutModels<T extends Record<string, unknown>>(req: T): T {
  const out = { ...req };
  delete out.models;
  return out;
}

/**
 * Runs the exchange on each model of the chain in turn: the next only when no upstream of this one can
 * have done the work (busy, not connected, 429/503: nothing billed, nothing sent to the client), the
 * client is still there, and a model is left. A model after the first is told so (`note`).
 */
export async function tryInOrder(ctx: ExchangeClient, chain: readonly ModelConfig[], run: (model: ModelConfig, note: FallbackNote | undefined) => Promise<void>): Promise<void> {
  // One model (no fallback): the call itself, so that no frame waits on it holding the request.
  if (chain.length === 1) return run(chain[0]!, undefined);
  for (const [i, model] of chain.entries()) {
    try {
      await run(model, i === 0 ? undefined : { from: chain[0]!.id });
      return;
    } catch (e) {
      if (i === chain.length - 1 || !wasUndone(e) || ctx.aborted) throw e;
    }
  }
}

// POST /alpha/v1/chat/completions: the schema, the parameters we refuse, and the metered pass-through.
import type { Services } from '../../server/app.js';
import type { Route } from '../../server/router.js';
import { countTokens } from '../../sim/index.js';
import { unsupported, parseJson, rejectAsked } from '../validate.js';
import { checkChat, CHAT_REJECTED } from './schemas.js';
import { metered } from './metered.js';

export function chatRoutes(s: Services): Route[] {
  return [{
    method: 'POST', path: '/alpha/v1/chat/completions', name: 'chat.completions', scope: 'llm',
    handler: async (ctx, { body }) => {
      const req = parseJson(checkChat, body);
      rejectChatParams(req);
      const model = s.models.resolve(req.model, 'chat');
      const maxOut = Math.min(req.max_completion_tokens ?? req.max_tokens ?? model.maxOutputTokens, model.maxOutputTokens);
      await metered(s, ctx, {
        model, body: body!, parsed: req, upstreamPath: '/v1/chat/completions', maxOutputTokens: maxOut * (req.n ?? 1),
        promptEstimate: () => chatPromptTokens(req.messages),
        outputEstimate: (json) => choicesText(json, (c) => (c.message as { content?: unknown } | undefined)?.content),
      });
    },
  }];
}

export function rejectChatParams(req: Record<string, unknown>): void {
  rejectAsked(req, CHAT_REJECTED);
  const mod = req.modalities;
  if (mod !== undefined && mod !== null && !(Array.isArray(mod) && mod.length === 1 && mod[0] === 'text')) {
    throw unsupported('modalities', 'only ["text"] output is available');
  }
}

/** Prompt tokens counted with the sim tokenizer: used only when an upstream reported no usage. */
export function chatPromptTokens(messages: readonly Record<string, unknown>[]): number {
  let n = 3;
  for (const m of messages) {
    n += 3;
    const c = m.content;
    if (typeof c === 'string') n += countTokens(c);
    else if (Array.isArray(c)) for (const p of c) if (typeof (p as { text?: unknown }).text === 'string') n += countTokens((p as { text: string }).text);
  }
  return n;
}

export function choicesText(json: Record<string, unknown>, pick: (c: Record<string, unknown>) => unknown): number {
  let out = 0;
  for (const c of (json.choices as Record<string, unknown>[] | undefined) ?? []) {
    const t = pick(c);
    if (typeof t === 'string') out += countTokens(t);
  }
  return out;
}

// POST /alpha/v1/responses: passed through to hosts that serve it, translated to chat completions (and back) for the rest.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import { Type } from '@sinclair/typebox';
import { checkMetadata, compile, parseJson, rejectAsked } from '../validate.js';
import { textExchange, type ExchangeClient } from './metered.js';
import { fallbackPlan, tryInOrder } from './fallback.js';
import { chatPromptTokens, countTokens } from '../../meter/tokens.js';
import { toChat, fromChat, newId, RESPONSES_REJECTED } from './responses-map.js';
import { ResponsesStream } from './responses-stream.js';
import { chatOutputTokens } from './chat.js';

const ResponsesRequest = Type.Object({
  model: Type.String({ minLength: 1 }),
  input: Type.Union([Type.String(), Type.Array(Type.Object({}, { additionalProperties: true }))]),
  instructions: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  max_output_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
  stream: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  tools: Type.Optional(Type.Array(Type.Object({ type: Type.String() }, { additionalProperties: true }))),
}, { additionalProperties: true });
const check = compile(ResponsesRequest);

export function responsesRoutes(s: Services): Route[] {
  return [{
    method: 'POST', path: '/v1/responses', name: 'responses', scope: 'llm', metered: true,
    handler: (ctx, { body }) => response(s, ctx, body),
  }];
}

/** One Responses request, from a live request or a batch line; `models` (or the key's opt-in) as for chat. */
export async function response(s: Services, ctx: ExchangeClient, body: Buffer | null): Promise<void> {
  const parsed = parseJson(check, body, ctx.headers['content-type']) as Record<string, unknown> & { model: string; max_output_tokens?: number | null };
  rejectAsked(parsed, RESPONSES_REJECTED);
  checkMetadata(parsed.metadata);
  const plan = fallbackPlan(s, ctx.key, parsed, body!, 'chat', ['max_output_tokens']);
  const req = plan.req;
  // Each model of the chain is served its own way: passed through to a Responses host, or translated to chat.
  return tryInOrder(ctx, plan.chain, (model, fallback) => {
    const maxOut = req.max_output_tokens ?? model.maxOutputTokens;
    if (s.upstreams.config(model.upstream).responsesApi) {
      // The host serves the Responses API itself: pass through (renaming the model only), metered
      // from its own Responses events and usage.
      return textExchange(s, ctx, {
        model, body: plan.body, parsed: req, upstreamPath: '/v1/responses', maxOutputTokens: maxOut, responsesUpstream: true,
        bounded: req.max_output_tokens != null, fallback,
        promptTokens: () => countTokens(JSON.stringify(req.input ?? '') + String(req.instructions ?? '')),
        outputTokens: responsesOutputTokens,
      });
    }
    const chat = toChat(req, model.upstreamModel);
    // The shell lasts as long as the reply and echoes the request's settings, never its input: it does not keep the prompt.
    const { input: _input, ...settings } = req;
    const shell = { id: newId('resp'), createdAt: Math.floor(Date.now() / 1000), req: settings, model: model.id };
    return textExchange(s, ctx, {
      model, body: plan.body, parsed: req, upstreamPath: '/v1/chat/completions', maxOutputTokens: maxOut, bounded: req.max_output_tokens != null,
      upstreamBody: (upstreamModel) => Buffer.from(JSON.stringify({ ...chat, model: upstreamModel })), fallback,
      promptTokens: () => chatPromptTokens(chat.messages as Record<string, unknown>[]),
      outputTokens: chatOutputTokens,
      reshape: { json: (json) => JSON.stringify(fromChat(shell, json)), stream: () => new ResponsesStream(shell) },
    });
  });
}

/** Output tokens counted from a Response that carried no usage. At module level: a closure made in the handler would keep the request alive as long as the reply. */
const responsesOutputTokens = (json: Record<string, unknown>): number => countTokens(responsesText(json));

/** The text a buffered Response produced (messages and function-call arguments): counted when it reports no usage. */
function responsesText(json: Record<string, unknown>): string {
  let out = '';
  for (const item of (json.output as Record<string, unknown>[] | undefined) ?? []) {
    if (typeof item.arguments === 'string') out += `${item.arguments} `;
    for (const part of (item.content as Record<string, unknown>[] | undefined) ?? []) if (typeof part.text === 'string') out += `${part.text} `;
  }
  return out;
}

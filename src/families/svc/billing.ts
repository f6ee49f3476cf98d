// Billing routes under /svc/v1/billing (checkout, card, webhook) and the sandbox checkout page.
import { Type } from '@sinclair/typebox';
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { Ctx } from '../../server/context.js';
import { compile, parseJson } from '../validate.js';
import { dollarsToNano } from '../../money.js';
import { handleWebhook, payments, requestBase, sandboxSubmit, sandboxView, type Page } from '../../billing/index.js';

const ReturnUrl = Type.String({ pattern: '^https?://', maxLength: 2048 });
const Checkout = compile(Type.Object({
  amount: Type.Number({ minimum: 5, maximum: 1000, description: 'dollars, whole cents' }),
  return_url: Type.Optional(ReturnUrl),
}, { additionalProperties: false }));
const Card = compile(Type.Object({ return_url: Type.Optional(ReturnUrl) }, { additionalProperties: false }));

const HTML = 'text/html; charset=utf-8';

function sendPage(ctx: Ctx, p: Page | { redirect: string }): void {
  if ('redirect' in p) ctx.send(303, '', { location: p.redirect, 'cache-control': 'no-store' }, HTML);
  else ctx.send(p.status, p.body, p.headers, HTML);
}

export function billingRoutes(s: Services): Route[] {
  const routes: Route[] = [
    {
      method: 'POST', path: '/v1/billing/checkout', name: 'svc.billing.checkout', scope: 'any',
      handler: async (ctx, { body }) => {
        const req = parseJson(Checkout, body, ctx.headers['content-type']);
        ctx.json(200, await payments(s).checkout(ctx.key!.accountId, dollarsToNano(req.amount), req.return_url, requestBase(s, ctx.headers.host)));
      },
    },
    {
      method: 'POST', path: '/v1/billing/card', name: 'svc.billing.card', scope: 'any',
      handler: async (ctx, { body }) => {
        const req = body && body.length > 0 ? parseJson(Card, body, ctx.headers['content-type']) : {};
        ctx.json(200, await payments(s).setupCard(ctx.key!.accountId, req.return_url, requestBase(s, ctx.headers.host)));
      },
    },
    {
      method: 'POST', path: '/v1/billing/webhook', name: 'svc.billing.webhook', scope: 'public', bodyLimit: 1024 * 1024,
      handler: async (ctx, { body }) => {
        const outcome = await handleWebhook(s, body, ctx.headers['stripe-signature']);
        ctx.json(200, { received: true, outcome });
      },
    },
  ];
  if (s.config.payments.provider === 'sandbox') {
    routes.push(
      { method: 'GET', path: '/v1/billing/sandbox/checkout/:session', name: 'svc.billing.sandbox', scope: 'public',
        handler: async (ctx, { params }) => sendPage(ctx, await sandboxView(s, params.session!)) },
      { method: 'POST', path: '/v1/billing/sandbox/checkout/:session', name: 'svc.billing.sandbox', scope: 'public', bodyLimit: 16 * 1024,
        handler: async (ctx, { params, body }) => sendPage(ctx, await sandboxSubmit(s, params.session!, body, ctx.headers.host)) },
    );
  }
  return routes;
}

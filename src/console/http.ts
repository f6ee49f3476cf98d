// Console HTTP plumbing: security headers, HTML and redirect replies, cookies, form bodies, error pages.
import type { Services } from '../services.js';
import type { Ctx, Headers, OutHeaders } from '../server/context.js';
import { GatewayError } from '../errors.js';
import { log } from '../observe/log.js';
import { requestBase } from '../billing/index.js';
import type { Html } from './html.js';

export const HTML_TYPE = 'text/html; charset=utf-8';

/** An error whose message is written for the person at the browser; rendered as an HTML page. */
export class ConsoleError extends Error {
  constructor(readonly status: number, message: string, readonly title = 'Something went wrong', readonly headers: Headers = {}) {
    super(message);
  }
}

const headerCache = new WeakMap<Services, Headers>();

/** Scripts and styles only from /console/assets; forms only to this origin (and Stripe Checkout behind a 303). */
export function securityHeaders(s: Services): Headers {
  const hit = headerCache.get(s);
  if (hit) return hit;
  const formTargets = ["'self'"];
  if (s.config.payments.provider === 'stripe') formTargets.push('https://checkout.stripe.com');
  if (s.config.publicUrl) formTargets.push(new URL(s.config.publicUrl).origin);
  const h: Headers = {
    'content-security-policy': `default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; `
      + `form-action ${formTargets.join(' ')}; frame-ancestors 'none'; base-uri 'none'`,
    'x-frame-options': 'DENY',
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'same-origin',
    'cache-control': 'no-store',
  };
  headerCache.set(s, h);
  return h;
}

export function sendHtml(s: Services, ctx: Ctx, status: number, body: Html, headers: OutHeaders = {}): void {
  ctx.send(status, `<!doctype html>\n${body.value}`, { ...securityHeaders(s), ...headers }, HTML_TYPE);
}

export function redirect(s: Services, ctx: Ctx, location: string, headers: OutHeaders = {}): void {
  ctx.send(303, '', { ...securityHeaders(s), location, ...headers }, HTML_TYPE);
}

export function cookies(ctx: Ctx): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (ctx.headers.cookie ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i < 0) continue;
    const k = part.slice(0, i).trim();
    if (!out.has(k)) out.set(k, part.slice(i + 1).trim());
  }
  return out;
}

export function setCookie(s: Services, name: string, value: string, maxAgeSec: number): string {
  return `${name}=${value}; Path=/console; Max-Age=${maxAgeSec}; HttpOnly; SameSite=Lax${s.config.console.secureCookies ? '; Secure' : ''}`;
}

export function parseForm(ctx: Ctx, body: Buffer | null): URLSearchParams {
  const type = (ctx.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') throw new ConsoleError(415, 'This page accepts form submissions only.', 'Unsupported request');
  return new URLSearchParams((body ?? Buffer.alloc(0)).toString('utf8'));
}

export function query(ctx: Ctx): URLSearchParams {
  return new URLSearchParams(ctx.query);
}

/** The origin a browser reached us at, for links and payment return URLs (billing validates the Host header). */
export function baseUrl(s: Services, ctx: Ctx): string {
  return requestBase(s, ctx.headers.host);
}

/** Maps any failure to a ConsoleError; unexpected ones are logged with the request id and shown opaquely. */
export function toConsoleError(e: unknown, ctx: Ctx): ConsoleError {
  if (e instanceof ConsoleError) return e;
  // A GatewayError's message is written for clients (500s excepted): e.g. the payment provider being unreachable.
  if (e instanceof GatewayError && e.status !== 500) return new ConsoleError(e.status, e.message, e.status >= 500 ? 'Please try again' : 'Request refused', e.headers);
  log('error', 'console error', { request_id: ctx.requestId, route: ctx.routeName, error: String((e as Error)?.stack ?? e) });
  return new ConsoleError(500, `The console could not complete this request. Reference: ${ctx.requestId}`);
}

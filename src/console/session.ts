// Who is at the browser: the session cookie, CSRF tokens (per session, and a pre-session cookie for log-in forms).
import { timingSafeEqual } from 'node:crypto';
import type { Services } from '../services.js';
import type { Ctx } from '../server/context.js';
import { ConsoleError, cookies, setCookie } from './http.js';
import { newToken, sessionByToken, SESSION_TTL_MS, type Session } from '../store/console.js';

export const SESSION_COOKIE = 'tg_session';
export const PRE_COOKIE = 'tg_pre';
const TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;

export async function currentSession(s: Services, ctx: Ctx): Promise<Session | null> {
  const token = cookies(ctx).get(SESSION_COOKIE);
  if (!token || !TOKEN_RE.test(token)) return null;
  return sessionByToken(s.db, token);
}

export function sessionCookie(s: Services, token: string): string {
  return setCookie(s, SESSION_COOKIE, token, Math.floor(SESSION_TTL_MS / 1000));
}

export function clearSessionCookie(s: Services): string {
  return setCookie(s, SESSION_COOKIE, '', 0);
}

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && x.length > 0 && timingSafeEqual(x, y);
}

const CSRF_MESSAGE = 'This form has expired or was sent from another site. Go back, reload the page and try again.';

export function checkCsrf(session: Session, form: URLSearchParams): void {
  if (!same(form.get('csrf') ?? '', session.csrf)) throw new ConsoleError(403, CSRF_MESSAGE, 'Form check failed');
}

/**
 * Log-in and sign-up forms come before any session: their token is a random cookie that the form
 * repeats in a hidden field (double submit). Returns the token and, when new, the cookie to set.
 */
export function preToken(s: Services, ctx: Ctx): { token: string; setCookie?: string } {
  const have = cookies(ctx).get(PRE_COOKIE);
  if (have && TOKEN_RE.test(have)) return { token: have };
  const token = newToken();
  return { token, setCookie: setCookie(s, PRE_COOKIE, token, 24 * 3600) };
}

export function checkPreCsrf(ctx: Ctx, form: URLSearchParams): void {
  if (!same(form.get('csrf') ?? '', cookies(ctx).get(PRE_COOKIE) ?? '')) throw new ConsoleError(403, CSRF_MESSAGE, 'Form check failed');
}

/** Only paths inside the console may be a post-login destination (no open redirect). */
export function safeNext(next: string | null): string {
  return next && /^\/console(\/[^/\\]|$|\?)/.test(next) && !/[\r\n]/.test(next) ? next : '/console/keys';
}

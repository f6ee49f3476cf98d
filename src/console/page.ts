// What a signed-in page handler gets (services, request, session, form) and how it replies with a full page.
import type { Services } from '../services.js';
import type { Ctx } from '../server/context.js';
import type { Html } from './html.js';
import { appPage, type Section } from './layout.js';
import { redirect, sendHtml } from './http.js';
import type { Session } from '../store/console.js';

export interface Req {
  s: Services;
  ctx: Ctx;
  session: Session;
  params: Record<string, string>;
  query: URLSearchParams;
  /** The POSTed form, CSRF already checked; null on GET. */
  form: URLSearchParams | null;
}

export async function show(r: Req, title: string, section: Section | null, body: Html, status = 200): Promise<void> {
  const balance = await r.s.cache.balanceOf(r.session.user.accountId);
  sendHtml(r.s, r.ctx, status, appPage({ title, section, session: r.session, balance, body }));
}

export function seeOther(r: Req, location: string): void {
  redirect(r.s, r.ctx, location);
}

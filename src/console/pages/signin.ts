// One-time sign-in links: the page a link opens (a button, so a link preview cannot spend it) and the sign-in it makes.
import type { Services } from '../../services.js';
import type { Ctx } from '../../server/context.js';
import { html } from '../html.js';
import { barePage, csrfField } from '../layout.js';
import { ConsoleError, parseForm, redirect, sendHtml } from '../http.js';
import { checkPreCsrf, preToken, sessionCookie } from '../session.js';
import { createSession, signinLinkUser } from '../../store/console.js';
import { deviceCookie } from '../device.js';

const TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;

function spent(): ConsoleError {
  return new ConsoleError(410, 'This sign-in link was used already or has expired. Log in with your password, or ask the operator '
    + 'for a new link (the command `account sign-in-link EMAIL` makes one).', 'Sign-in link expired');
}

export async function showSigninLink(s: Services, ctx: Ctx, token: string): Promise<void> {
  const user = TOKEN_RE.test(token) ? await signinLinkUser(s.db, token, false) : null;
  if (!user) throw spent();
  const pre = preToken(s, ctx);
  const page = barePage('Sign in', html`<div class="card"><h1>Sign in</h1>
<p class="muted">This one-time link signs you in to the console as <strong>${user.email}</strong>.</p>
<form method="post" action="/console/signin/${token}">${csrfField(pre.token)}<button type="submit">Sign in as ${user.email}</button></form></div>`);
  sendHtml(s, ctx, 200, page, pre.setCookie ? { 'set-cookie': pre.setCookie } : {});
}

/** Spends the link and opens a session; the account page then offers to set a password. */
export async function useSigninLink(s: Services, ctx: Ctx, token: string, body: Buffer | null): Promise<void> {
  checkPreCsrf(ctx, parseForm(ctx, body));
  const user = TOKEN_RE.test(token) ? await signinLinkUser(s.db, token, true) : null;
  if (!user) throw spent();
  const { token: session } = await createSession(s.db, user.id);
  redirect(s, ctx, '/console/account?done=link', { 'set-cookie': [sessionCookie(s, session), await deviceCookie(s, user.id, null)] });
}

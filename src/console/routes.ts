// The web console under /console: sign-up/log-in, keys, balance and billing, usage, the account (password, sessions).
// Every route is 'public' to the gateway: the console authenticates by session cookie itself, checks the
// CSRF token on every POST, and renders its own errors as HTML pages.
import type { Services } from '../services.js';
import type { Route, RouteInput } from '../server/router.js';
import type { Ctx } from '../server/context.js';
import { html } from './html.js';
import { appPage, barePage } from './layout.js';
import { parseForm, query, redirect, sendHtml, toConsoleError } from './http.js';
import { checkCsrf, currentSession } from './session.js';
import { ASSETS, type Asset } from './assets.js';
import type { Session } from '../store/console.js';
import type { Req } from './page.js';
import { login, logout, showLogin, showSignup, signup } from './pages/auth.js';
import { createKeyAction, editKeyAction, editKeyPage, keysPage, revokeKeyAction, revokeKeyPage } from './pages/keys.js';
import { balanceJson, billingHome, ledgerCsv, saveAutoTopup, saveCard, topUp } from './pages/billing.js';
import { usagePage } from './pages/usage.js';
import { accountHome, changePasswordAction, logoutEverywhere } from './pages/account.js';
import { showSigninLink, useSigninLink } from './pages/signin.js';

const FORM_LIMIT = 64 * 1024;

type Method = Route['method'];

async function renderError(s: Services, ctx: Ctx, e: unknown, session: Session | null): Promise<void> {
  const err = toConsoleError(e, ctx);
  if (ctx.headersSent) { ctx.close(); return; }
  const body = html`<div class="card error-page"><h1>${err.title}</h1><p class="muted">${err.message}</p>
<p><a class="btn secondary" href="/console">Back to the console</a></p></div>`;
  const page = session
    ? appPage({ title: err.title, section: null, session, balance: await s.cache.balanceOf(session.user.accountId).catch(() => 0n), body })
    : barePage(err.title, body);
  sendHtml(s, ctx, err.status, page, err.headers);
}

/** A page for anyone (log-in, sign-up); it still learns whether a session exists. */
function open(s: Services, method: Method, path: string, name: string,
  fn: (ctx: Ctx, body: Buffer | null, session: Session | null) => Promise<void>): Route {
  return {
    method, path, name, scope: 'public', bodyLimit: FORM_LIMIT,
    handler: async (ctx, input: RouteInput) => {
      let session: Session | null = null;
      try {
        session = await currentSession(s, ctx);
        await fn(ctx, input.body, session);
      } catch (e) { await renderError(s, ctx, e, session); }
    },
  };
}

/** A page for anyone that reads its path's parameters (a sign-in link). */
function openWith(s: Services, method: Method, path: string, name: string,
  fn: (ctx: Ctx, body: Buffer | null, params: Record<string, string>) => Promise<void>): Route {
  return {
    method, path, name, scope: 'public', bodyLimit: FORM_LIMIT,
    handler: async (ctx, input: RouteInput) => {
      try { await fn(ctx, input.body, input.params); } catch (e) { await renderError(s, ctx, e, null); }
    },
  };
}

/** A signed-in page: no session sends the browser to log in; a POST must carry the session's CSRF token. */
function signedIn(s: Services, method: Method, path: string, name: string, fn: (r: Req) => Promise<void>): Route {
  return {
    method, path, name, scope: 'public', bodyLimit: FORM_LIMIT,
    handler: async (ctx, input: RouteInput) => {
      let session: Session | null = null;
      try {
        session = await currentSession(s, ctx);
        if (!session) {
          redirect(s, ctx, method === 'GET' ? `/console/login?next=${encodeURIComponent(ctx.url)}` : '/console/login');
          return;
        }
        let form: URLSearchParams | null = null;
        if (method !== 'GET') {
          form = parseForm(ctx, input.body);
          checkCsrf(session, form);
        }
        await fn({ s, ctx, session, params: input.params, query: query(ctx), form });
      } catch (e) { await renderError(s, ctx, e, session); }
    },
  };
}

function asset(a: Asset, name: string): Route {
  return {
    method: 'GET', path: a.path.split('?')[0]!, name, scope: 'public',
    handler: async (ctx) => ctx.send(200, a.body, {
      'cache-control': 'public, max-age=31536000, immutable', 'x-content-type-options': 'nosniff',
    }, a.type),
  };
}

export function consoleRoutes(s: Services): Route[] {
  const home = async (ctx: Ctx, _b: Buffer | null, session: Session | null) =>
    redirect(s, ctx, session ? '/console/keys' : '/console/login');
  return [
    asset(ASSETS.css, 'console.asset'), asset(ASSETS.js, 'console.asset'), asset(ASSETS.icon, 'console.asset'),
    open(s, 'GET', '/console', 'console.home', home),
    open(s, 'GET', '/console/', 'console.home', home),
    open(s, 'GET', '/console/login', 'console.login', (ctx, _b, session) => showLogin(s, ctx, session)),
    open(s, 'POST', '/console/login', 'console.login', (ctx, body) => login(s, ctx, body)),
    open(s, 'GET', '/console/signup', 'console.signup', (ctx, _b, session) => showSignup(s, ctx, session)),
    open(s, 'POST', '/console/signup', 'console.signup', (ctx, body) => signup(s, ctx, body)),
    openWith(s, 'GET', '/console/signin/:token', 'console.signin_link', (ctx, _b, params) => showSigninLink(s, ctx, params.token!)),
    openWith(s, 'POST', '/console/signin/:token', 'console.signin_link', (ctx, body, params) => useSigninLink(s, ctx, params.token!, body)),
    signedIn(s, 'POST', '/console/logout', 'console.logout', (r) => logout(s, r.ctx, r.session)),
    signedIn(s, 'POST', '/console/logout-everywhere', 'console.logout_everywhere', logoutEverywhere),
    signedIn(s, 'GET', '/console/account', 'console.account', accountHome),
    signedIn(s, 'POST', '/console/account/password', 'console.account', changePasswordAction),
    signedIn(s, 'GET', '/console/keys', 'console.keys', keysPage),
    signedIn(s, 'POST', '/console/keys', 'console.keys', createKeyAction),
    signedIn(s, 'GET', '/console/keys/:prefix', 'console.key', editKeyPage),
    signedIn(s, 'POST', '/console/keys/:prefix', 'console.key', editKeyAction),
    signedIn(s, 'GET', '/console/keys/:prefix/revoke', 'console.key.revoke', revokeKeyPage),
    signedIn(s, 'POST', '/console/keys/:prefix/revoke', 'console.key.revoke', revokeKeyAction),
    signedIn(s, 'GET', '/console/usage', 'console.usage', usagePage),
    signedIn(s, 'GET', '/console/billing', 'console.billing', billingHome),
    signedIn(s, 'GET', '/console/billing/balance', 'console.billing', balanceJson),
    signedIn(s, 'GET', '/console/billing/ledger.csv', 'console.ledger_csv', ledgerCsv),
    signedIn(s, 'POST', '/console/billing/topup', 'console.topup', topUp),
    signedIn(s, 'POST', '/console/billing/card', 'console.card', saveCard),
    signedIn(s, 'POST', '/console/billing/auto-topup', 'console.auto_topup', saveAutoTopup),
  ];
}

// Page shells: the signed-in frame (top bar, navigation, balance) and the bare frame for log-in and errors.
import { html, type Html } from './html.js';
import { ASSETS } from './assets.js';
import { usd } from './format.js';
import type { Session } from '../store/console.js';

export type Section = 'keys' | 'usage' | 'billing' | 'account';

function head(title: string): Html {
  return html`<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · Tollgate</title><link rel="icon" href="${ASSETS.icon.path}" type="image/svg+xml">
<link rel="stylesheet" href="${ASSETS.css.path}"><script src="${ASSETS.js.path}" defer></script></head>`;
}

function brand(): Html {
  return html`<a class="brand" href="/console"><img src="${ASSETS.icon.path}" alt="">Tollgate <small>console</small></a>`;
}

export interface AppPage { title: string; section: Section | null; session: Session; balance: bigint; body: Html }

export function appPage(p: AppPage): Html {
  const link = (s: Section, label: string) => html`<a href="/console/${s}"${p.section === s ? html` aria-current="page"` : ''}>${label}</a>`;
  return html`<html lang="en">${head(p.title)}<body>
<header class="top"><div class="bar">${brand()}
<nav class="main">${link('keys', 'API keys')}${link('usage', 'Usage')}${link('billing', 'Billing')}<a href="/status">Status</a><span class="narrow-only">${link('account', 'Account')}</span></nav>
<div class="who"><a class="pill" href="/console/billing" title="Balance" data-balance>${usd(p.balance)}</a>
<a class="email" href="/console/account" title="Account: password and sessions"${p.section === 'account' ? html` aria-current="page"` : ''}>${p.session.user.email}</a>
<form method="post" action="/console/logout" class="inline"><input type="hidden" name="csrf" value="${p.session.csrf}">
<button type="submit" class="link linklike">Log out</button></form></div></div></header>
<main>${p.body}</main></body></html>`;
}

/** A page anyone may read (the status page): the console's top bar without an account. */
export function publicPage(title: string, body: Html): Html {
  return html`<html lang="en">${head(title)}<body>
<header class="top"><div class="bar">${brand()}<nav class="main"><a href="/status" aria-current="page">Status</a><a href="/console">Console</a></nav></div></header>
<main>${body}</main></body></html>`;
}

export function barePage(title: string, body: Html): Html {
  return html`<html lang="en">${head(title)}<body><div class="auth">${brand()}${body}</div></body></html>`;
}

export function notice(kind: 'ok' | 'err' | 'info' | 'warn', text: string | Html | null | undefined): Html {
  return text ? html`<div class="notice ${kind}" role="${kind === 'err' ? 'alert' : 'status'}">${text}</div>` : html``;
}

export function csrfField(token: string): Html {
  return html`<input type="hidden" name="csrf" value="${token}">`;
}

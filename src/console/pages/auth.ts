// Sign-up, log-in and log-out: forms, argon2id password checks, throttling, the session and known-device cookies.
import type { Services } from '../../services.js';
import type { Ctx } from '../../server/context.js';
import { html, type Html } from '../html.js';
import { barePage, csrfField, notice } from '../layout.js';
import { parseForm, query, redirect, sendHtml } from '../http.js';
import { burnVerify, hashPassword, verifyPassword } from '../hash.js';
import { MAX_PASSWORD, MIN_PASSWORD, PASSWORD_HINT, passwordProblem } from '../password.js';
import { createSession, createUser, deleteSession, EmailTaken, hasPassword, userByEmail, type ConsoleUser, type Session } from '../../store/console.js';
import { checkPreCsrf, clearSessionCookie, preToken, safeNext, sessionCookie } from '../session.js';
import { addressBucket, admit } from '../throttle.js';
import { deviceCookie, knownDevice } from '../device.js';

const EMAIL_RE = /^[^\s@<>"']+@[^\s@<>"']+\.[^\s@<>"']+$/;

const DONE: Record<string, string> = {
  'logged-out': 'You have been logged out.',
  'logged-out-everywhere': 'You have been logged out of every session of this account.',
};

interface FormState { email?: string; error?: string; next?: string; info?: string }

function loginForm(csrf: string, st: FormState): Html {
  return barePage('Log in', html`<div class="card"><h1>Log in</h1><p class="muted">Manage your API keys, usage and balance.</p>
${notice('err', st.error)}${notice('info', st.info)}
<form method="post" action="/console/login">${csrfField(csrf)}<input type="hidden" name="next" value="${st.next ?? ''}">
<div class="field"><label for="email">Email</label><input id="email" name="email" type="email" autocomplete="username" required value="${st.email ?? ''}" autofocus></div>
<div class="field"><label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password" required></div>
<button type="submit">Log in</button></form></div>
<p class="alt">New to Tollgate? <a href="/console/signup">Create an account</a></p>`);
}

function signupForm(csrf: string, st: FormState): Html {
  return barePage('Create an account', html`<div class="card"><h1>Create an account</h1>
<p class="muted">One prepaid balance for every model behind Tollgate.</p>${notice('err', st.error)}
<form method="post" action="/console/signup">${csrfField(csrf)}
<div class="field"><label for="email">Email</label><input id="email" name="email" type="email" autocomplete="email" required value="${st.email ?? ''}" autofocus></div>
<div class="field"><label for="password">Password</label><input id="password" name="password" type="password" autocomplete="new-password" required minlength="${MIN_PASSWORD}">
<div class="hint">${PASSWORD_HINT}</div></div>
<button type="submit">Create account</button></form></div>
<p class="alt">Already have an account? <a href="/console/login">Log in</a></p>`);
}

function sendForm(s: Services, ctx: Ctx, status: number, render: (csrf: string) => Html): void {
  const pre = preToken(s, ctx);
  sendHtml(s, ctx, status, render(pre.token), pre.setCookie ? { 'set-cookie': pre.setCookie } : {});
}

export async function showLogin(s: Services, ctx: Ctx, session: Session | null): Promise<void> {
  const q = query(ctx);
  if (session) { redirect(s, ctx, safeNext(q.get('next'))); return; }
  sendForm(s, ctx, 200, (csrf) => loginForm(csrf, { next: q.get('next') ?? '', info: DONE[q.get('done') ?? ''] }));
}

export async function showSignup(s: Services, ctx: Ctx, session: Session | null): Promise<void> {
  if (session) { redirect(s, ctx, '/console/keys'); return; }
  sendForm(s, ctx, 200, (csrf) => signupForm(csrf, {}));
}

function normalEmail(v: string | null): string {
  return (v ?? '').trim().toLowerCase();
}

/**
 * Counted first (per address, and per account, or per device when this browser logged in to it before), then
 * checked: a success gives its count back, so the limits count failures and guesses in flight.
 */
export async function login(s: Services, ctx: Ctx, body: Buffer | null): Promise<void> {
  const form = parseForm(ctx, body);
  checkPreCsrf(ctx, form);
  const email = normalEmail(form.get('email'));
  const password = form.get('password') ?? '';
  const next = form.get('next') ?? '';
  const user = email && password.length <= MAX_PASSWORD ? await userByEmail(s.db, email) : null;
  const device = user ? await knownDevice(s, ctx, user.id) : null;
  const counted = await admit(s, 'login', [addressBucket('login', ctx.remoteAddress),
    user && device ? `login:device:${user.id}:${device}` : `login:acct:${email}`]);
  let ok = false;
  // A user without a password (made for an account by the operator) signs in with a one-time link only.
  if (user && hasPassword(user)) ok = await verifyPassword(password, user.passwordHash);
  else await burnVerify(password.slice(0, MAX_PASSWORD));
  if (!user || !ok) {
    sendForm(s, ctx, 401, (csrf) => loginForm(csrf, { email, next, error: 'That email and password do not match an account.' }));
    return;
  }
  await counted.refund();
  const { token } = await createSession(s.db, user.id);
  redirect(s, ctx, safeNext(next), { 'set-cookie': [sessionCookie(s, token), await deviceCookie(s, user.id, device)] });
}

/** Every valid sign-up counts (per address and per email), before the account is made. */
export async function signup(s: Services, ctx: Ctx, body: Buffer | null): Promise<void> {
  const form = parseForm(ctx, body);
  checkPreCsrf(ctx, form);
  const email = normalEmail(form.get('email'));
  const password = form.get('password') ?? '';
  const again = (error: string, status = 422) => sendForm(s, ctx, status, (csrf) => signupForm(csrf, { email, error }));
  if (!EMAIL_RE.test(email) || email.length > 254) return again('Enter a valid email address.');
  const weak = passwordProblem(password, email);
  if (weak) return again(weak);
  await admit(s, 'signup', [addressBucket('signup', ctx.remoteAddress), `signup:email:${email}`]);
  let user: ConsoleUser;
  try {
    user = await createUser(s.db, email, await hashPassword(password));
  } catch (e) {
    if (e instanceof EmailTaken) return again('An account with this email exists already. Log in instead.', 409);
    throw e;
  }
  const { token } = await createSession(s.db, user.id);
  redirect(s, ctx, '/console/keys?done=welcome', { 'set-cookie': [sessionCookie(s, token), await deviceCookie(s, user.id, null)] });
}

export async function logout(s: Services, ctx: Ctx, session: Session): Promise<void> {
  await deleteSession(s.db, session.tokenHash);
  redirect(s, ctx, '/console/login?done=logged-out', { 'set-cookie': clearSessionCookie(s) });
}

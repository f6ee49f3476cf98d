// The account page: set or change the password (which ends every other session) and log out everywhere.
import { hashPassword, verifyPassword } from '../hash.js';
import { html } from '../html.js';
import { csrfField, notice } from '../layout.js';
import { redirect } from '../http.js';
import { MAX_PASSWORD, MIN_PASSWORD, PASSWORD_HINT, passwordProblem } from '../password.js';
import { clearSessionCookie, sessionCookie } from '../session.js';
import { activeSessions, changePassword, deleteSessionsOf, hasPassword } from '../../store/console.js';
import { admit } from '../throttle.js';
import { show, type Req } from '../page.js';

const DONE: Record<string, string> = {
  password: 'Your password was changed. Every other session of this account was logged out.',
  link: 'You are signed in. Set a password below to log in with your email next time.',
};

async function accountPage(r: Req, error: string | null = null, status = 200): Promise<void> {
  const u = r.session.user;
  const sessions = await activeSessions(r.s.db, u.id);
  const has = hasPassword(u);
  const body = html`<div class="head"><div><h1>Account</h1><p class="muted">${u.email} · account <code>${u.accountId}</code></p></div></div>
${notice('ok', DONE[r.query.get('done') ?? ''])}
<div class="grid g2">
<div class="card"><h2>${has ? 'Change password' : 'Set a password'}</h2>${notice('err', error)}
<form method="post" action="/console/account/password">${csrfField(r.session.csrf)}
${has ? html`<div class="field"><label for="current">Current password</label><input id="current" name="current" type="password" autocomplete="current-password" required></div>`
    : html`<p class="muted">This account has no password yet: you signed in with a one-time link.</p>`}
<div class="field"><label for="password">New password</label><input id="password" name="password" type="password" autocomplete="new-password" required minlength="${MIN_PASSWORD}">
<div class="hint">${PASSWORD_HINT}</div></div>
<button type="submit">${has ? 'Change password' : 'Set password'}</button></form>
<p class="foot">Changing it logs out every other session of this account; this browser stays logged in.</p></div>
<div class="card"><h2>Sessions</h2><p class="muted">This account has ${sessions} active session${sessions === 1 ? '' : 's'}.
Lost a device or logged in somewhere you no longer trust? End them all, this one included.</p>
<form method="post" action="/console/logout-everywhere">${csrfField(r.session.csrf)}<button type="submit" class="danger">Log out everywhere</button></form></div>
</div>`;
  await show(r, 'Account', 'account', body, status);
}

export async function accountHome(r: Req): Promise<void> {
  await accountPage(r);
}

/**
 * The current password (guesses throttled per user, as log-in is per account), a new one under the sign-up
 * rules; then every session ends and this browser gets a new one.
 */
export async function changePasswordAction(r: Req): Promise<void> {
  const user = r.session.user;
  const current = r.form!.get('current') ?? '';
  const next = r.form!.get('password') ?? '';
  const weak = passwordProblem(next, user.email);
  if (weak) return accountPage(r, weak, 422);
  // A user who signed in with a one-time link and has no password yet sets one without a current one.
  if (hasPassword(user)) {
    const counted = await admit(r.s, 'password', [`password:user:${user.id}`]);
    if (current.length > MAX_PASSWORD || !(await verifyPassword(current, user.passwordHash))) return accountPage(r, 'Your current password is not right.', 422);
    await counted.refund();
    if (next === current) return accountPage(r, 'Choose a new password different from the current one.', 422);
  }
  const { token } = await changePassword(r.s.db, user.id, await hashPassword(next));
  redirect(r.s, r.ctx, '/console/account?done=password', { 'set-cookie': sessionCookie(r.s, token) });
}

export async function logoutEverywhere(r: Req): Promise<void> {
  await deleteSessionsOf(r.s.db, r.session.user.id);
  redirect(r.s, r.ctx, '/console/login?done=logged-out-everywhere', { 'set-cookie': clearSessionCookie(r.s) });
}

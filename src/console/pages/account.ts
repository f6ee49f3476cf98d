// The account page: change the password (which ends every other session) and log out everywhere.
import { hashPassword, verifyPassword } from '../hash.js';
import { html } from '../html.js';
import { csrfField, notice } from '../layout.js';
import { redirect } from '../http.js';
import { MAX_PASSWORD, MIN_PASSWORD, PASSWORD_HINT, passwordProblem } from '../password.js';
import { clearSessionCookie, sessionCookie } from '../session.js';
import { activeSessions, changePassword, deleteSessionsOf } from '../store.js';
import { admit } from '../throttle.js';
import { show, type Req } from '../page.js';

const DONE: Record<string, string> = {
  password: 'Your password was changed. Every other session of this account was logged out.',
};

async function accountPage(r: Req, error: string | null = null, status = 200): Promise<void> {
  const u = r.session.user;
  const sessions = await activeSessions(r.s.db, u.id);
  const body = html`<div class="head"><div><h1>Account</h1><p class="muted">${u.email} · account <code>${u.accountId}</code></p></div></div>
${notice('ok', DONE[r.query.get('done') ?? ''])}
<div class="grid g2">
<div class="card"><h2>Change password</h2>${notice('err', error)}
<form method="post" action="/console/account/password">${csrfField(r.session.csrf)}
<div class="field"><label for="current">Current password</label><input id="current" name="current" type="password" autocomplete="current-password" required></div>
<div class="field"><label for="password">New password</label><input id="password" name="password" type="password" autocomplete="new-password" required minlength="${MIN_PASSWORD}">
<div class="hint">${PASSWORD_HINT}</div></div>
<button type="submit">Change password</button></form>
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
  const counted = await admit(r.s, 'password', [`password:user:${user.id}`]);
  if (current.length > MAX_PASSWORD || !(await verifyPassword(current, user.passwordHash))) return accountPage(r, 'Your current password is not right.', 422);
  await counted.refund();
  if (next === current) return accountPage(r, 'Choose a new password different from the current one.', 422);
  const { token } = await changePassword(r.s.db, user.id, await hashPassword(next));
  redirect(r.s, r.ctx, '/console/account?done=password', { 'set-cookie': sessionCookie(r.s, token) });
}

export async function logoutEverywhere(r: Req): Promise<void> {
  await deleteSessionsOf(r.s.db, r.session.user.id);
  redirect(r.s, r.ctx, '/console/login?done=logged-out-everywhere', { 'set-cookie': clearSessionCookie(r.s) });
}

// Password rules for sign-up and password change: length, and no trivial, common or email-derived passwords.
import { COMMON_PASSWORDS } from './common-passwords.js';

export const MIN_PASSWORD = 10;
export const MAX_PASSWORD = 256;
export const PASSWORD_HINT = `At least ${MIN_PASSWORD} characters; not a common password, a sequence like 1234567890, one character repeated, or your email’s name.`;

/** Runs a password may not be, forwards or backwards (digits and letters wrap: 7890123…). */
const RUNS = ['0123456789', 'abcdefghijklmnopqrstuvwxyz', 'qwertyuiop', 'asdfghjkl', 'zxcvbnm'];

function runOf(p: string, run: string): boolean {
  for (let i = 1; i < p.length; i++) {
    const a = run.indexOf(p[i - 1]!);
    if (a < 0 || run.indexOf(p[i]!) !== (a + 1) % run.length) return false;
  }
  return true;
}

function isRun(p: string): boolean {
  const back = [...p].reverse().join('');
  return RUNS.some((run) => runOf(p, run) || runOf(back, run));
}

/** A short unit said again and again: "abcdabcdabcd", "passwordpassword". */
function repeatsUnit(p: string): boolean {
  for (let u = 1; u <= p.length / 2; u++) {
    let same = true;
    for (let i = u; i < p.length && same; i++) same = p[i] === p[i - u];
    if (same) return true;
  }
  return false;
}

/** Common as it stands, or a common word with a few digits or symbols around it ("Superman2024!"). */
function isCommon(p: string): boolean {
  const core = p.replace(/^[\d\W_]{1,4}/, '').replace(/[\d\W_]{1,6}$/, '');
  return COMMON_PASSWORDS.has(p) || (core.length >= 4 && COMMON_PASSWORDS.has(core));
}

/** What is wrong with `password` for the account `email`, as a sentence that says what to fix; null when it is fine. */
export function passwordProblem(password: string, email: string): string | null {
  const chars = [...password];
  if (chars.length < MIN_PASSWORD) return `Choose a password of at least ${MIN_PASSWORD} characters.`;
  if (chars.length > MAX_PASSWORD) return `Choose a password of at most ${MAX_PASSWORD} characters.`;
  if (password.trim() === '') return 'Choose a password that is not only spaces: use letters, digits or symbols.';
  const p = password.toLowerCase();
  const distinct = new Set(p).size;
  if (distinct === 1) return 'This password is one character repeated. Choose one that mixes different characters.';
  if (isRun(p)) return 'This password is a sequence of consecutive characters (like 1234567890 or abcdefghij). Choose one that is harder to guess.';
  if (distinct < 4) return 'This password uses fewer than 4 different characters. Mix in more letters, digits or symbols.';
  if (repeatsUnit(p)) return 'This password repeats the same few characters. Choose one without a repeating pattern.';
  if (isCommon(p.trim())) return 'This is one of the most common passwords. Choose one that is harder to guess, such as a few unrelated words.';
  const local = email.split('@')[0]?.toLowerCase() ?? '';
  if (local.length >= 3 && p.includes(local)) return 'This password contains the name in your email address. Choose one that does not.';
  return null;
}

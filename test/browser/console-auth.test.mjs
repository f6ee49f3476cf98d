// The console's log-in defences over plain HTTP: password rules, throttling under concurrency, known devices,
// and ending sessions (log out everywhere, a password change).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startGateway } from '../helpers/gateway.mjs';
import { ConsoleClient } from './client.mjs';

const email = () => `a${randomBytes(5).toString('hex')}@example.com`;

// ---- password rules ------------------------------------------------------------------------------------

const WEAK = [
  ['aaaaaaaaaa', /one character repeated/],
  [' '.repeat(10), /not only spaces/],
  ['\t \t \t \t \t ', /not only spaces/],
  ['1234567890', /sequence of consecutive characters/],
  ['0987654321', /sequence of consecutive characters/],
  ['abcdefghij', /sequence of consecutive characters/],
  ['ababababab', /fewer than 4 different characters/],
  ['abcdabcdabcd', /repeats the same few characters/],
  ['qwertyuiop', /sequence of consecutive characters/],
  ['QWERTY1234', /most common passwords/],
  ['Superman2024!', /most common passwords/],
  ['Password123', /most common passwords/],
  ['iloveyou12', /most common passwords/],
];

test('sign-up refuses trivial and common passwords and says what to fix', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  for (const [password, why] of WEAK) {
    const r = await new ConsoleClient(gw.url).post('/console/signup', { email: email(), password }, '/console/signup');
    assert.equal(r.status, 422, JSON.stringify(password));
    assert.match(r.text, /<div class="notice err" role="alert">/, JSON.stringify(password));
    assert.match(r.text, why, JSON.stringify(password));
    assert.equal(r.setCookies.find((c) => c.startsWith('tg_session=')), undefined, 'no session for a refused sign-up');
  }
  const mine = new ConsoleClient(gw.url);
  const named = await mine.post('/console/signup', { email: 'zebra.crossing@example.com', password: 'Zebra.Crossing-2024' });
  assert.equal(named.status, 422);
  assert.match(named.text, /contains the name in your email address/);
  assert.equal((await mine.post('/console/signup', { email: 'zebra.crossing@example.com', password: 'correct horse battery' })).status, 303,
    'a long password of unrelated words is fine');
});

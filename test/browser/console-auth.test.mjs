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

// ---- throttling ----------------------------------------------------------------------------------------

/** Posts many log-in (or sign-up) forms at once from one client; → the statuses, in order. */
async function burst(client, path, forms) {
  const csrf = await client.csrf(path);
  const res = await Promise.all(forms.map((f) => client.request(path, { method: 'POST', form: { csrf, ...f } })));
  return res.map((r) => r.status);
}

function tally(statuses) {
  const n = {};
  for (const s of statuses) n[s] = (n[s] ?? 0) + 1;
  return n;
}

for (const store of ['pglite', 'postgres']) {
  test(`300 concurrent log-in guesses from one address evaluate at most 10 passwords, the right one last among them is refused (${store})`, async (t) => {
    const gw = await startGateway(t, store === 'pglite' ? { embedded: true } : { store: 'postgres' });
    const victim = email();
    await new ConsoleClient(gw.url).signup(victim, 'the right password');
    const guesses = Array.from({ length: 300 }, (_, i) => ({ email: victim, password: i === 299 ? 'the right password' : `wrong guess ${i}` }));
    const statuses = await burst(new ConsoleClient(gw.url, { localAddress: '127.0.0.2' }), '/console/login', guesses);
    const n = tally(statuses);
    assert.ok((n[401] ?? 0) + (n[303] ?? 0) <= 10, `at most 10 evaluated: ${JSON.stringify(n)}`);
    assert.equal((n[401] ?? 0) + (n[303] ?? 0) + (n[429] ?? 0), 300, JSON.stringify(n));
    assert.equal(statuses[299], 429, 'the right password, last in the burst, was never evaluated');

    // 300 emails from one address: the address's limit holds just the same.
    const spray = Array.from({ length: 300 }, () => ({ email: email(), password: 'correct horse battery' }));
    const m = tally(await burst(new ConsoleClient(gw.url, { localAddress: '127.0.0.3' }), '/console/login', spray));
    assert.ok((m[401] ?? 0) <= 10, `at most 10 evaluated per address: ${JSON.stringify(m)}`);

    // One account from 30 addresses at once: the account's limit holds across addresses.
    const target = email();
    await new ConsoleClient(gw.url).signup(target, 'the right password');
    const waves = await Promise.all(Array.from({ length: 30 }, (_, a) =>
      burst(new ConsoleClient(gw.url, { localAddress: `127.0.1.${a + 10}` }), '/console/login',
        Array.from({ length: 10 }, (_, i) => ({ email: target, password: `wrong ${a} ${i}` })))));
    const w = tally(waves.flat());
    assert.ok((w[401] ?? 0) <= 10, `at most 10 evaluated per account: ${JSON.stringify(w)}`);
  });
}

test('300 concurrent sign-ups from one address create at most 10 accounts', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const forms = Array.from({ length: 300 }, () => ({ email: email(), password: 'correct horse battery' }));
  const n = tally(await burst(new ConsoleClient(gw.url, { localAddress: '127.0.0.6' }), '/console/signup', forms));
  assert.ok((n[303] ?? 0) <= 10, `at most 10 sign-ups: ${JSON.stringify(n)}`);
  assert.equal((n[303] ?? 0) + (n[429] ?? 0), 300, JSON.stringify(n));
  const r = await new ConsoleClient(gw.url, { localAddress: '127.0.0.6' }).post('/console/signup', { email: email(), password: 'correct horse battery' });
  assert.equal(r.status, 429);
  assert.match(r.text, /Too many sign-ups/);
  assert.equal((await new ConsoleClient(gw.url, { localAddress: '127.0.0.7' }).signup(email())).status, 303, 'another address still signs up');
});

test('a device that logged in before still logs in while its account is locked, but not past its address’s limit', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const victim = email();
  const owner = new ConsoleClient(gw.url, { localAddress: '127.0.0.3' });
  await owner.signup(victim, 'the right password');
  const device = owner.jar.get('tg_device');
  assert.ok(device, 'signing up marks the device as known');
  await owner.post('/console/logout', {}, '/console/keys');
  assert.equal(owner.jar.get('tg_device'), device, 'logging out keeps the device known');

  // Anyone can lock the account for unknown devices with 10 bad guesses.
  const guesser = new ConsoleClient(gw.url, { localAddress: '127.0.0.2' });
  for (let i = 0; i < 10; i++) assert.equal((await guesser.login(victim, `wrong guess ${i}`)).status, 401);
  assert.equal((await new ConsoleClient(gw.url, { localAddress: '127.0.0.4' }).login(victim, 'the right password')).status, 429,
    'an unknown device is locked out of the account');

  // The owner's device is not, and its success does not count as a failure.
  const ok = await owner.login(victim, 'the right password');
  assert.equal(ok.status, 303, 'the known device logs in with the right password');
  assert.equal(ok.headers.location, '/console/keys');
  assert.equal((await owner.request('/console/keys')).status, 200);

  // The device cookie does not lift an address's own limit, nor work for another account, nor when forged.
  const stolen = new ConsoleClient(gw.url, { localAddress: '127.0.0.2' });
  stolen.jar.set('tg_device', device);
  assert.equal((await stolen.login(victim, 'the right password')).status, 429, 'the guessing address stays over its limit');
  const [user, id, issued, sig] = device.split('.');
  for (const forged of [`${user}.${id}.${issued}.${sig.slice(1)}A`, `${user}x.${id}.${issued}.${sig}`, `${user}.${id}.${Number(issued) + 1}.${sig}`, 'garbage']) {
    const c = new ConsoleClient(gw.url, { localAddress: '127.0.0.5' });
    c.jar.set('tg_device', forged);
    assert.equal((await c.login(victim, 'the right password')).status, 429, `forged device cookie ${forged}`);
  }
  const other = new ConsoleClient(gw.url, { localAddress: '127.0.0.8' });
  await other.signup(email(), 'another right one');
  await other.post('/console/logout', {}, '/console/keys');
  assert.equal((await other.login(victim, 'the right password')).status, 429, 'a device known to another account');

  // A known device gets its own 10 guesses, not unlimited ones.
  const roaming = new ConsoleClient(gw.url, { localAddress: '127.0.0.9' });
  roaming.jar.set('tg_device', device);
  for (let i = 0; i < 10; i++) assert.equal((await roaming.login(victim, `device guess ${i}`)).status, 401);
  assert.equal((await roaming.login(victim, 'the right password')).status, 429);
});

// ---- ending sessions -----------------------------------------------------------------------------------

test('log out everywhere ends every session of the account and no other account’s', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const who = email();
  const laptop = new ConsoleClient(gw.url);
  await laptop.signup(who, 'the right password');
  const phone = new ConsoleClient(gw.url);
  assert.equal((await phone.login(who, 'the right password')).status, 303);
  const bystander = new ConsoleClient(gw.url);
  await bystander.signup(email());

  assert.match((await laptop.request('/console/keys')).text, /<a class="email" href="\/console\/account"/, 'the header links to the account page');
  const page = await laptop.request('/console/account');
  assert.equal(page.status, 200);
  assert.match(page.text, /<form method="post" action="\/console\/logout-everywhere"/);
  assert.match(page.text, /2 active sessions/);
  const forged = await laptop.request('/console/logout-everywhere', { method: 'POST', form: { csrf: 'x'.repeat(43) } });
  assert.equal(forged.status, 403, 'it needs the session’s CSRF token like every other form');
  assert.equal((await phone.request('/console/keys')).status, 200);

  const out = await laptop.post('/console/logout-everywhere', {}, '/console/account');
  assert.equal(out.status, 303);
  assert.equal(out.headers.location, '/console/login?done=logged-out-everywhere');
  for (const [name, c] of [['this browser', laptop], ['the other one', phone]]) {
    assert.equal((await c.request('/console/keys')).status, 303, `${name} is logged out`);
  }
  assert.equal((await bystander.request('/console/keys')).status, 200, 'another account keeps its session');
  assert.match((await laptop.request('/console/login?done=logged-out-everywhere')).text, /logged out of every session/);
});

test('changing the password needs the current one and the same rules, ends every other session and renews this one', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const who = email();
  const laptop = new ConsoleClient(gw.url);
  await laptop.signup(who, 'the old password');
  const phone = new ConsoleClient(gw.url);
  assert.equal((await phone.login(who, 'the old password')).status, 303);
  const before = laptop.jar.get('tg_session');
  const change = (current, password) => laptop.post('/console/account/password', { current, password }, '/console/account');

  const wrong = await change('not the old one', 'a brand new passphrase');
  assert.equal(wrong.status, 422);
  assert.match(wrong.text, /current password is not right/);
  const weak = await change('the old password', '1234567890');
  assert.equal(weak.status, 422);
  assert.match(weak.text, /sequence of consecutive characters/);
  const same = await change('the old password', 'the old password');
  assert.equal(same.status, 422);
  assert.match(same.text, /different from the current one/);
  assert.equal((await phone.request('/console/keys')).status, 200, 'refused changes end nothing');

  const ok = await change('the old password', 'a brand new passphrase');
  assert.equal(ok.status, 303);
  assert.equal(ok.headers.location, '/console/account?done=password');
  assert.notEqual(laptop.jar.get('tg_session'), before, 'this browser gets a new session');
  assert.equal((await laptop.request('/console/keys')).status, 200, 'and stays logged in');
  assert.match((await laptop.request('/console/account?done=password')).text, /Your password was changed/);
  assert.equal((await phone.request('/console/keys')).status, 303, 'every other session ended');
  const replay = new ConsoleClient(gw.url);
  replay.jar.set('tg_session', before);
  assert.equal((await replay.request('/console/keys')).status, 303, 'the old session token is dead too');
  assert.equal((await new ConsoleClient(gw.url).login(who, 'the old password')).status, 401);
  assert.equal((await new ConsoleClient(gw.url).login(who, 'a brand new passphrase')).status, 303);

  // Guessing the current password from a stolen session is throttled like log-in.
  for (let i = 0; i < 9; i++) assert.equal((await change(`guess ${i}`, 'yet another passphrase')).status, 422);
  assert.equal((await change('guess 10', 'yet another passphrase')).status, 429);
});

// The console over plain HTTP: CSRF, log-in throttling, escaping, cookies, ownership and the ledger CSV export.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, createHash } from 'node:crypto';
import pg from 'pg';
import WebSocket from 'ws';
import { join } from 'node:path';
import { startGateway, bearer, chatBody, assertInvariants, ROOT } from '../helpers/gateway.mjs';
import { ConsoleClient, parseCsv } from './client.mjs';

const email = () => `c${randomBytes(5).toString('hex')}@example.com`;

test('html`` escapes every interpolation unless it is markup already, and dollars print exactly', async () => {
  const { html, safe } = await import(join(ROOT, 'dist', 'console', 'html.js'));
  const { usd } = await import(join(ROOT, 'dist', 'console', 'format.js'));
  const label = `<b title="x">'&\``;
  assert.equal(html`<td title="${label}">${label}</td>`.value,
    '<td title="&lt;b title=&quot;x&quot;&gt;&#39;&amp;&#96;">&lt;b title=&quot;x&quot;&gt;&#39;&amp;&#96;</td>');
  assert.equal(html`<ul>${['<a>', html`<li>${'<b>'}</li>`]}</ul>`.value, '<ul>&lt;a&gt;<li>&lt;b&gt;</li></ul>');
  assert.equal(html`${safe('<svg/>')}${null}${undefined}${false}${0}${10n}`.value, '<svg/>010');
  assert.equal(usd(0n), '$0.00');
  assert.equal(usd(1_500_000_000n), '$1.50');
  assert.equal(usd(1_234_567_000_000_001n), '$1,234,567.000000001');
  assert.equal(usd(-34_000n), '\u2212$0.000034');
  assert.equal(usd(10_000_000_000n, { plus: true }), '+$10.00');
});

test('every console POST without the session’s own CSRF token is refused and changes nothing', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const alice = new ConsoleClient(gw.url);
  await alice.signup(email());
  const mallory = new ConsoleClient(gw.url);
  await mallory.signup(email());
  const foreign = await mallory.csrf('/console/keys');

  for (const form of [{}, { csrf: '' }, { csrf: 'x'.repeat(43) }, { csrf: foreign }]) {
    const r = await alice.request('/console/keys', { method: 'POST', form: { label: 'forged', scopes: 'llm', ...form } });
    assert.equal(r.status, 403, `create key with ${JSON.stringify(form)}`);
    assert.match(r.headers['content-type'], /^text\/html/);
    assert.match(r.text, /Form check failed/);
  }
  for (const path of ['/console/billing/topup', '/console/billing/auto-topup', '/console/billing/card', '/console/logout',
    '/console/logout-everywhere', '/console/account/password']) {
    const r = await alice.request(path, { method: 'POST', form: { amount: '10', csrf: foreign } });
    assert.equal(r.status, 403, path);
  }
  const keys = await alice.request('/console/keys');
  assert.equal(keys.status, 200, 'still logged in: the forged log-out did nothing');
  assert.match(keys.text, /No keys yet/);
  assert.doesNotMatch(keys.text, /forged/);

  // Log-in and sign-up forms carry a pre-session token that must match their cookie.
  const stranger = new ConsoleClient(gw.url);
  const login = await stranger.request('/console/login', { method: 'POST', form: { email: email(), password: 'whatever-it-is' } });
  assert.equal(login.status, 403);
  const signup = await stranger.request('/console/signup', { method: 'POST', form: { csrf: foreign, email: email(), password: 'long enough pw' } });
  assert.equal(signup.status, 403);

  // A form post that is not form-encoded is refused too.
  const json = await alice.request('/console/keys', { method: 'POST', form: { csrf: await alice.csrf('/console/keys') }, headers: { 'content-type': 'application/json' } });
  assert.equal(json.status, 415);
});

test('log-in is throttled after 10 failures per email and per IP, with a 429 page', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const victim = email();
  await new ConsoleClient(gw.url).signup(victim, 'the right password');

  // Per email: ten wrong guesses from one address lock the email for every address.
  const guesser = new ConsoleClient(gw.url, { localAddress: '127.0.0.2' });
  for (let i = 0; i < 10; i++) {
    const r = await guesser.login(victim, `wrong guess ${i}`);
    assert.equal(r.status, 401, `guess ${i}`);
    assert.match(r.text, /do not match/);
  }
  const locked = await guesser.login(victim, 'the right password');
  assert.equal(locked.status, 429);
  assert.match(locked.headers['content-type'], /^text\/html/);
  const retry = Number(locked.headers['retry-after']);
  assert.ok(retry > 850 && retry <= 900, `Retry-After is what is left of the 15-minute window: ${retry}`);
  assert.match(locked.text, /Too many failed log-in attempts/);
  const elsewhere = await new ConsoleClient(gw.url, { localAddress: '127.0.0.3' }).login(victim, 'the right password');
  assert.equal(elsewhere.status, 429, 'the email stays locked from another address');

  // Per IP: ten failures for ten different emails lock that address, not others.
  const sprayer = new ConsoleClient(gw.url, { localAddress: '127.0.0.4' });
  for (let i = 0; i < 10; i++) assert.equal((await sprayer.login(email(), 'password123456')).status, 401);
  assert.equal((await sprayer.login(email(), 'password123456')).status, 429);
  const other = email();
  await new ConsoleClient(gw.url).signup(other, 'another right one');
  const ok = await new ConsoleClient(gw.url, { localAddress: '127.0.0.5' }).login(other, 'another right one');
  assert.equal(ok.status, 303, 'another address still logs in');
  assert.equal(ok.headers.location, '/console/keys');
});

test('a hostile key label is escaped on every page that shows it', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const c = new ConsoleClient(gw.url);
  await c.signup(email());
  const hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>'&`;
  const escaped = '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&#39;&amp;';
  const { key, prefix, page } = await c.createKey({ label: hostile });
  await gw.cli('account', 'credit', await c.accountId(), '--amount', '1');
  assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() })).status, 200);
  // The debit reaches the usage page with its group commit, just after the reply (about 50 ms): wait for it,
  // or on an idle machine the page is read before it lists the request that shows the label.
  let usage;
  for (let i = 0; i < 40; i++) {
    usage = await c.request('/console/usage');
    if (!usage.text.includes('No billed requests yet')) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  const pages = {
    created: page, list: await c.request('/console/keys'), edit: await c.request(`/console/keys/${prefix}`),
    revoke: await c.request(`/console/keys/${prefix}/revoke`), usage,
  };
  for (const [name, r] of Object.entries(pages)) {
    assert.ok(r.status === 200 || r.status === 201, `${name}: ${r.status}`);
    assert.ok(!r.text.includes('<script>alert'), `${name} carries no live script`);
    assert.ok(!r.text.includes('<img src=x'), `${name} carries no live img`);
    assert.ok(r.text.includes(escaped), `${name} shows the label escaped`);
    assert.match(r.headers['content-security-policy'], /script-src 'self'/);
    assert.equal(r.headers['x-frame-options'], 'DENY');
    assert.equal(r.headers['referrer-policy'], 'same-origin');
  }
  // The API reports the label verbatim: escaping belongs to the HTML edge only.
  assert.equal((await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json()).label, hostile);
});

test('the session cookie is HttpOnly and SameSite=Lax, stores only a hash, and log-out ends it', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const c = new ConsoleClient(gw.url);
  const r = await c.signup(email());
  const cookie = r.setCookies.find((x) => x.startsWith('tg_session='));
  assert.ok(cookie, 'a session cookie is set');
  assert.match(cookie, /; HttpOnly/);
  assert.match(cookie, /; SameSite=Lax/);
  assert.match(cookie, /; Path=\/console/);
  assert.doesNotMatch(cookie, /; Secure/, 'not Secure on plain http unless configured');
  const token = c.jar.get('tg_session');

  const stolen = new ConsoleClient(gw.url);
  stolen.jar.set('tg_session', token);
  assert.equal((await stolen.request('/console/keys')).status, 200);
  const out = await c.post('/console/logout', {}, '/console/keys');
  assert.equal(out.status, 303);
  assert.equal(out.headers.location, '/console/login?done=logged-out');
  const after = await stolen.request('/console/keys');
  assert.equal(after.status, 303, 'the old token no longer works anywhere');
  assert.equal(after.headers.location, `/console/login?next=${encodeURIComponent('/console/keys')}`);
  assert.equal((await stolen.request('/console')).headers.location, '/console/login');
});

test('the console stores an argon2id hash of the password and a SHA-256 of the session token, never either secret', async (t) => {
  const gw = await startGateway(t, { store: 'postgres' });
  const c = new ConsoleClient(gw.url);
  const who = email();
  const password = 'a long enough passphrase';
  await c.signup(who, password);
  const token = c.jar.get('tg_session');
  const db = new pg.Client({ connectionString: gw.db.url });
  await db.connect();
  const { rows: [user] } = await db.query('SELECT password_hash FROM console_users WHERE email = $1', [who]);
  assert.match(user.password_hash, /^\$argon2id\$v=19\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+$/);
  assert.ok(!user.password_hash.includes(password));
  const { rows: sessions } = await db.query('SELECT token_hash FROM console_sessions');
  await db.end();
  assert.equal(sessions.length, 1);
  assert.notEqual(sessions[0].token_hash, token);
  assert.equal(sessions[0].token_hash, createHash('sha256').update(token).digest('hex'));
  // The stored hash verifies: the same password logs in, another does not.
  assert.equal((await new ConsoleClient(gw.url).login(who, password)).status, 303);
  assert.equal((await new ConsoleClient(gw.url).login(who, 'not the passphrase')).status, 401);
});

test('one account cannot see, edit or revoke another account’s keys', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const owner = new ConsoleClient(gw.url);
  await owner.signup(email());
  const { key, prefix } = await owner.createKey({ label: 'mine' });
  const other = new ConsoleClient(gw.url);
  await other.signup(email());
  assert.equal((await other.request(`/console/keys/${prefix}`)).status, 404);
  assert.equal((await other.request(`/console/keys/${prefix}/revoke`)).status, 404);
  assert.equal((await other.post(`/console/keys/${prefix}/revoke`, {}, '/console/keys')).status, 404);
  assert.equal((await other.post(`/console/keys/${prefix}`, { rpm: '1' }, '/console/keys')).status, 404);
  assert.doesNotMatch((await other.request('/console/keys')).text, new RegExp(prefix));
  const info = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
  assert.equal(info.label, 'mine');
  assert.notEqual(info.rate_limit.rpm, 1);
});

test('the console refuses a taken email, a short password, top-ups outside $5 to $1,000 and bad limits, saying why', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const e = email();
  await new ConsoleClient(gw.url).signup(e);
  const again = await new ConsoleClient(gw.url).post('/console/signup', { email: e.toUpperCase(), password: 'correct horse battery' });
  assert.equal(again.status, 409);
  assert.match(again.text, /exists already/);
  const short = await new ConsoleClient(gw.url).post('/console/signup', { email: email(), password: 'short' });
  assert.equal(short.status, 422);
  const c = new ConsoleClient(gw.url);
  await c.signup(email());
  for (const amount of ['4.99', '1000.01', '10.001', 'ten', '-5']) {
    const r = await c.post('/console/billing/topup', { amount }, '/console/billing');
    assert.equal(r.status, 422, amount);
    assert.match(r.text, /from \$5 to \$1,000/);
  }
  const auto = await c.post('/console/billing/auto-topup', { enabled: 'on', threshold: 'lots', amount: '10' }, '/console/billing');
  assert.equal(auto.status, 422);
  assert.match(auto.text, /<div class="notice err" role="alert">[^<]*threshold/);
  assert.match(auto.text, /value="lots"/, 'the form keeps what was typed');
  const bad = await c.post('/console/keys', { label: 'x', scopes: 'llm', rpm: '0' }, '/console/keys');
  assert.equal(bad.status, 422);
  assert.match(bad.text, /Requests per minute must be a whole number/);
});

for (const store of ['pglite', 'postgres']) {
  test(`the ledger exports as CSV with exact amounts and RFC 4180 quoting (${store})`, async (t) => {
    const gw = await startGateway(t, store === 'pglite' ? { embedded: true } : { store: 'postgres' });
    const c = new ConsoleClient(gw.url);
    assert.equal((await c.request('/console/billing/ledger.csv')).status, 303, 'not without a session');
    await c.signup(email());
    const account = await c.accountId();
    const reason = 'refund, "goodwill"\nsecond line';
    await gw.cli('account', 'credit', account, '--amount', '2.5', '--reason', reason);
    await gw.cli('account', 'credit', account, '--amount', '0.000000001', '--reason', '=HYPERLINK("http://evil")');
    const { key, prefix } = await c.createKey({ label: 'csv' });
    // The CLI wrote the credits straight to the store: the gateway sees them through its change feed,
    // within a second by contract, not necessarily at once.
    for (let i = 0; i < 40; i++) {
      const k = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
      if (k.balance > 0) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    const chat = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() });
    assert.equal(chat.status, 200);
    const requestId = chat.headers.get('x-request-id');
    const usage = (await chat.json()).usage;

    // The debit is settled in a group commit just after the reply, not necessarily before it: wait for it.
    let r;
    for (let i = 0; i < 40; i++) {
      r = await c.request('/console/billing/ledger.csv');
      if (r.status !== 200 || parseCsv(r.text).length >= 4) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'text/csv; charset=utf-8');
    assert.match(r.headers['content-disposition'], /attachment; filename="tollgate-ledger\.csv"/);
    assert.ok(r.text.includes('"refund, ""goodwill""\nsecond line"'), 'quotes doubled and the field quoted');
    const rows = parseCsv(r.text);
    assert.deepEqual(rows[0], ['time', 'kind', 'amount_usd', 'reason', 'model', 'key_prefix', 'input_tokens', 'output_tokens', 'request_id',
      'characters', 'audio_seconds_in', 'audio_seconds_out', 'audio_input_tokens', 'audio_output_tokens', 'cached_input_tokens']);
    assert.equal(rows.length, 4);
    const [, refund, formula, debit] = rows;
    assert.deepEqual(refund.slice(1, 6), ['credit', '2.5', reason, '', '']);
    assert.equal(refund[8], '', 'a credit names no request');
    assert.deepEqual(formula.slice(1, 4), ['credit', '0.000000001', `'=HYPERLINK("http://evil")`]);
    assert.deepEqual(debit.slice(1, 2), ['debit']);
    assert.deepEqual(debit.slice(3), ['chat.completions', 'sim-chat', prefix, String(usage.prompt_tokens), String(usage.completion_tokens), requestId, '', '', '', '', '', '']);
    assert.match(requestId, /^req_/);
    assert.ok(!Number.isNaN(Date.parse(debit[0])));
    const show = await gw.cli('account', 'show', account);
    const nano = (d) => { const [w, f = ''] = d.replace('-', '').split('.'); const v = BigInt(w) * 10n ** 9n + BigInt(f.padEnd(9, '0')); return d.startsWith('-') ? -v : v; };
    assert.equal(rows.slice(1).reduce((a, x) => a + nano(x[2]), 0n), nano(String(show.balance)), 'the rows sum to the balance exactly');

    // The same entries on the usage page: the table and the chart by product.
    const page = await c.request('/console/usage');
    assert.match(page.text, new RegExp(`<code>${prefix}…</code>`));
    assert.match(page.text, /<title>\d{4}-\d\d-\d\d · chat · \$0\.\d+<\/title>/);
    await assertInvariants(assert, gw, account);
  });
}

/** Opens a WebSocket and resolves with it and its parsed frames once it closes or `done(frame)` holds. */
function socket(url, headers, send, done) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    const frames = [];
    ws.on('open', () => { for (const m of send) ws.send(JSON.stringify(m)); });
    ws.on('message', (d) => { const f = JSON.parse(d.toString()); frames.push(f); if (done(f)) { ws.close(); } });
    ws.on('close', () => resolve(frames));
    ws.on('error', reject);
  });
}

test('every debit shows the units it was priced by, under one naming of routes: characters, audio seconds, realtime transcription and response apart; the chart names products', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const c = new ConsoleClient(gw.url);
  await c.signup(email());
  const account = await c.accountId();
  await gw.cli('account', 'credit', account, '--amount', '5');
  const { key } = await gw.newKey(account, { scopes: 'llm,voice' });
  const xi = { 'xi-api-key': key, 'content-type': 'application/json' };
  const ws = gw.url.replace(/^http/, 'ws');
  // Beta text to speech: 31 characters.
  const text = 'Thirty-one characters are here.';
  assert.equal((await gw.fetch('/beta/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb', { method: 'POST', headers: xi, body: JSON.stringify({ text }) })).status, 200);
  // Stream-input: 20 characters spoken.
  const said = 'Spoken on a socket. ';
  const frames = await socket(`${ws}/beta/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb/stream-input?model_id=eleven_flash_v2_5`, { 'xi-api-key': key },
    [{ text: ' ' }, { text: said, flush: true }, { text: '' }], (f) => f.isFinal === true);
  assert.equal(frames.at(-1).isFinal, true);
  // Speech as PCM, then a realtime session that transcribes it and answers.
  const pcm = Buffer.from(await (await gw.fetch('/v1/audio/speech', { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tts-1', voice: 'alloy', input: 'Where is the station?', response_format: 'pcm' }) })).arrayBuffer());
  const rt = await socket(`${ws}/v1/realtime?model=gpt-realtime`, bearer(key), [
    { type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_audio', audio: pcm.toString('base64') }] } },
    { type: 'response.create', response: { output_modalities: ['text'], max_output_tokens: 20 } },
  ], (f) => f.type === 'response.done' || f.type === 'error');
  const done = rt.find((f) => f.type === 'response.done');
  assert.ok(done, JSON.stringify(rt.filter((f) => f.type === 'error')));
  const heard = rt.find((f) => f.type === 'conversation.item.input_audio_transcription.completed').usage.seconds;
  assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() })).status, 200);

  let rows;
  for (let i = 0; i < 60; i++) {
    rows = parseCsv((await c.request('/console/billing/ledger.csv')).text);
    if (rows.filter((r) => r[1] === 'debit').length >= 6) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  const header = rows[0];
  assert.deepEqual(header.slice(9), ['characters', 'audio_seconds_in', 'audio_seconds_out', 'audio_input_tokens', 'audio_output_tokens', 'cached_input_tokens']);
  const col = (row, name) => row[header.indexOf(name)];
  const debit = (reason) => { const r = rows.filter((x) => x[3] === reason); assert.equal(r.length, 1, `${reason}: ${JSON.stringify(rows.map((x) => x[3]))}`); return r[0]; };
  assert.equal(col(debit('beta.tts'), 'characters'), String([...text].length));
  assert.ok(Number(col(debit('beta.tts.stream_input'), 'characters')) >= said.trim().length);
  assert.equal(col(debit('audio.speech'), 'characters'), '21');
  const tr = debit('realtime.transcription');
  assert.equal(Number(col(tr, 'audio_seconds_in')), heard);
  assert.equal(col(tr, 'input_tokens'), '0');
  const resp = debit('realtime.response');
  assert.equal(col(resp, 'input_tokens'), String(done.response.usage.input_tokens));
  assert.equal(col(resp, 'output_tokens'), String(done.response.usage.output_tokens));
  assert.equal(col(resp, 'audio_seconds_in'), '');
  assert.ok(rows.every((r) => r[1] !== 'debit' || /^(beta\.|audio\.|realtime\.|chat\.completions$)/.test(r[3])), 'one scheme of route names');

  // The usage table: no voice row reads "0 in · 0 out"; the realtime parts show audio and tokens apart; the chart names products.
  const page = (await c.request('/console/usage')).text;
  assert.doesNotMatch(page, /\b0 in · 0 out/);
  assert.match(page, new RegExp(`<td>beta\\.tts</td><td>sim-tts</td><td class="num small">${[...text].length} chars</td>`));
  assert.match(page, new RegExp(`<td>realtime\\.transcription</td><td>sim-realtime</td><td class="num small">${heard} s audio in</td>`));
  assert.match(page, new RegExp(`<td>realtime\\.response</td><td>sim-realtime</td><td class="num small">${done.response.usage.input_tokens} in · ${done.response.usage.output_tokens} out</td>`));
  for (const product of ['speech', 'realtime', 'chat']) assert.match(page, new RegExp(`<title>\\d{4}-\\d\\d-\\d\\d · ${product} · \\$`));
  assert.doesNotMatch(page, / · other · /);
  const { productOf } = await import(join(ROOT, 'dist', 'console', 'pages', 'usage.js'));
  assert.deepEqual(['batch.chat.completions', 'batch.embeddings', 'responses', 'beta.sts.stream', 'beta.stt', 'embeddings'].map(productOf),
    ['batch', 'batch', 'chat', 'voice changer', 'transcription', 'embeddings']);
  await assertInvariants(assert, gw, account);
});

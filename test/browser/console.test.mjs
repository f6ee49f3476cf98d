// The console in a real browser (Chromium via playwright-core): sign up, key once, top up, usage, revoke.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { chromium } from 'playwright-core';
import { startGateway, bearer, chatBody, assertInvariants, priceNano, ROOT } from '../helpers/gateway.mjs';

const ARTIFACTS = join(ROOT, 'test', 'artifacts');
const CHROMIUM = process.env.TOLLGATE_CHROMIUM ?? '/usr/bin/chromium';

async function launch(t) {
  const browser = await chromium.launch({
    executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  t.after(() => browser.close());
  return browser;
}

/** Exact dollars as the console prints them: at least cents, thousands separators, nothing rounded. */
function usd(nano) {
  const neg = nano < 0n;
  const a = neg ? -nano : nano;
  const frac = (a % 1_000_000_000n).toString().padStart(9, '0').replace(/0+$/, '').padEnd(2, '0');
  return `${neg ? '\u2212' : ''}$${(a / 1_000_000_000n).toLocaleString('en-US')}.${frac}`;
}

test('a person signs up, creates a key, tops up, sees usage and revokes the key in a browser', async (t) => {
  mkdirSync(ARTIFACTS, { recursive: true });
  const gw = await startGateway(t, { embedded: true });
  const browser = await launch(t);
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, deviceScaleFactor: 1 });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: gw.url });
  const page = await context.newPage();
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') problems.push(m.text()); });
  page.on('pageerror', (e) => problems.push(String(e)));
  const shot = (name, p = page) => p.screenshot({ path: join(ARTIFACTS, `console-${name}.png`), fullPage: true });

  // Sign up.
  await page.goto(`${gw.url}/console`);
  assert.equal(new URL(page.url()).pathname, '/console/login');
  await shot('login');
  await page.getByRole('link', { name: 'Create an account' }).click();
  await page.waitForURL('**/console/signup');
  const email = `b${randomBytes(4).toString('hex')}@example.com`;
  await page.fill('#email', email);
  await page.fill('#password', 'correct horse battery');
  await shot('signup');
  await Promise.all([page.waitForURL('**/console/keys?done=welcome'), page.getByRole('button', { name: 'Create account' }).click()]);
  assert.match(await page.locator('.notice.ok').textContent(), /Welcome to Tollgate/);
  assert.equal(await page.locator('.pill[data-balance]').textContent(), '$0.00');
  await shot('keys-empty');

  // Create a key with limits; it is shown once, with a working copy button.
  await page.fill('#label', 'browser test');
  await page.uncheck('input[name=scopes][value=voice]');
  await page.fill('#spend_limit', '5');
  await page.selectOption('#period', 'daily');
  await page.fill('#rpm', '120');
  await page.fill('#concurrency', '4');
  await page.getByRole('button', { name: 'Create key' }).last().click();
  await page.waitForSelector('#new-key');
  const key = await page.inputValue('#new-key');
  assert.match(key, /^svc_live_[0-9A-Za-z]{40}$/);
  const copy = page.getByRole('button', { name: 'Copy' });
  await copy.click();
  await page.getByRole('button', { name: 'Copied' }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), key);
  await shot('key-created');
  await page.getByRole('link', { name: 'Done, back to keys' }).click();
  await page.waitForURL('**/console/keys');
  assert.ok(!(await page.content()).includes(key), 'the full key is never shown again');
  const prefix = key.slice(0, 12);
  const row = page.locator(`tr[data-prefix="${prefix}"]`);
  assert.match(await row.textContent(), /browser test/);
  assert.match(await row.textContent(), /\$5\.00 \/ day/);

  // The key works at once, with the limits chosen.
  let info = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
  assert.equal(info.label, 'browser test');
  assert.equal(info.limit, 5);
  assert.equal(info.limit_reset, 'daily');
  assert.equal(info.rate_limit.rpm, 120);
  assert.equal(info.balance, 0);

  // Edit its limits; the change applies to the very next request.
  await row.getByRole('link', { name: 'Edit' }).click();
  await page.waitForURL(`**/console/keys/${prefix}`);
  await page.fill('#rpm', '60');
  await page.fill('#spend_limit', '7.5');
  await shot('key-edit');
  await page.getByRole('button', { name: 'Save limits' }).click();
  await page.waitForURL('**/console/keys?done=saved');
  info = await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json();
  assert.equal(info.rate_limit.rpm, 60);
  assert.equal(info.limit, 7.5);
  await shot('keys');

  // Top up $10 through the sandbox checkout and watch the balance rise.
  await page.getByRole('navigation').getByRole('link', { name: 'Billing' }).click();
  await page.waitForURL('**/console/billing');
  assert.equal(await page.locator('#balance').textContent(), '$0.00');
  const accountId = await page.locator('#account-id').textContent();
  await page.fill('#amount', '10');
  await page.getByRole('button', { name: 'Continue to payment' }).click();
  await page.waitForURL(/\/svc\/v1\/billing\/sandbox\/checkout\/cs_/);
  await shot('checkout');
  // A second tab on the return page before the payment clears: it shows the wait, then the credit, by itself.
  const session = new URL(page.url()).pathname.split('/').pop();
  const waiting = await context.newPage();
  waiting.on('pageerror', (e) => problems.push(String(e)));
  await waiting.goto(`${gw.url}/console/billing?paid=${session}`);
  assert.match(await waiting.locator('[data-poll-session]').textContent(), /as soon as the payment clears/);
  assert.equal(await waiting.locator('#balance').textContent(), '$0.00');
  await shot('billing-waiting', waiting);
  await Promise.all([page.waitForURL(`**/console/billing?paid=${session}`), page.getByRole('button', { name: 'Pay $10.00' }).click()]);
  assert.equal(await page.locator('#balance').textContent(), '$10.00');
  await page.locator('.notice.ok', { hasText: 'Payment received: $10.00 was added to your balance.' }).waitFor();
  await waiting.locator('.notice.ok', { hasText: 'Payment received: $10.00 was added to your balance.' }).waitFor({ timeout: 15_000 });
  assert.equal(await waiting.locator('#balance').textContent(), '$10.00');
  assert.equal(await waiting.locator('.pill[data-balance]').textContent(), '$10.00');
  await waiting.close();
  assert.equal(await page.locator('.pill[data-balance]').textContent(), '$10.00');
  const credit = page.locator('table tbody tr').first();
  assert.match(await credit.textContent(), /credit\s+\+\$10\.00/);
  await shot('billing');

  // Save a card whose off-session charges need authentication, and arm automatic top-up above the balance.
  await page.getByRole('button', { name: 'Save a card' }).click();
  await page.waitForLoadState('load');
  await page.fill('#card_number', '4000 0027 6000 3184');
  await shot('checkout-card');
  await Promise.all([page.waitForURL('**/console/billing?done=card'), page.getByRole('button', { name: 'Save card' }).click()]);
  assert.doesNotMatch(await page.locator('#card').textContent(), /no card saved/);
  await page.check('input[name=enabled]');
  await page.fill('#threshold', '20');
  await page.fill('#auto-amount', '10');
  await page.getByRole('button', { name: 'Save settings' }).click();
  await page.waitForURL('**/console/billing?done=auto-topup');
  assert.ok(await page.isChecked('input[name=enabled]'));

  // A billed request appears in the usage table and chart.
  const chat = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() });
  assert.equal(chat.status, 200);
  const { usage } = await chat.json();
  const cost = priceNano(usage.prompt_tokens, usage.completion_tokens);
  await page.getByRole('navigation').getByRole('link', { name: 'Usage' }).click();
  await page.waitForURL('**/console/usage');
  const recent = page.locator('#recent tbody tr').first();
  const cells = await recent.locator('td').allInnerTexts();
  assert.equal(cells[1], `${prefix}…`);
  assert.equal(cells[2], 'chat.completions');
  assert.equal(cells[3], 'sim-chat');
  assert.equal(cells[4], `${usage.prompt_tokens} in · ${usage.completion_tokens} out`);
  assert.equal(cells[5], usd(cost));
  const today = new Date().toISOString().slice(0, 10);
  assert.equal(await page.locator('#by-product svg rect title').first().textContent(), `${today} · chat · ${usd(cost)}`);
  assert.equal(await page.locator('#by-key svg rect title').first().textContent(), `${today} · ${prefix}… (browser test) · ${usd(cost)}`);
  await shot('usage');

  // The billed request took the balance under the threshold: the charge needs authentication, and billing says so.
  await page.getByRole('navigation').getByRole('link', { name: 'Billing' }).click();
  for (let i = 0; i < 50 && (await page.locator('#auto-status').count()) === 0; i++) {
    await new Promise((r) => setTimeout(r, 200));
    await page.reload();
  }
  assert.equal(await page.locator('#auto-status').getAttribute('data-status'), 'authentication_required');
  await shot('billing-auto-topup');

  // Revoke the key (with a confirmation step): the API refuses it, the console keeps its history.
  await page.getByRole('navigation').getByRole('link', { name: 'API keys' }).click();
  await row.getByRole('link', { name: 'Revoke' }).click();
  await page.waitForURL(`**/console/keys/${prefix}/revoke`);
  await shot('key-revoke');
  assert.equal((await gw.fetch('/svc/v1/key', { headers: bearer(key) })).status, 200, 'nothing happens before confirming');
  await page.getByRole('button', { name: 'Revoke key' }).click();
  await page.waitForURL('**/console/keys?done=revoked');
  assert.match(await row.textContent(), /revoked/);
  assert.match(await row.textContent(), new RegExp(usd(cost).replace(/[$.]/g, '\\$&')), 'usage history stays listed');
  assert.equal(await row.getByRole('link', { name: 'Edit' }).count(), 0);
  await shot('keys-revoked');
  const refused = await gw.fetch('/svc/v1/key', { headers: bearer(key) });
  assert.equal(refused.status, 401);

  assert.deepEqual(problems, [], 'no script errors, CSP violations or failed loads');

  // Errors are pages too, inside the signed-in frame.
  const missing = await page.goto(`${gw.url}/console/keys/svc_live_nope`);
  assert.equal(missing.status(), 404);
  assert.match(missing.headers()['content-type'], /^text\/html/);
  await page.getByRole('heading', { name: 'Key not found' }).waitFor();
  await shot('not-found');

  // The account page, from the email in the header: the password form and log out everywhere.
  await page.getByRole('link', { name: email }).click();
  await page.waitForURL('**/console/account');
  await page.getByRole('heading', { name: 'Change password' }).waitFor();
  await page.getByRole('button', { name: 'Log out everywhere' }).waitFor();
  await shot('account');

  // Log out.
  await page.getByRole('button', { name: 'Log out', exact: true }).click();
  await page.waitForURL('**/console/login?done=logged-out');
  await page.goto(`${gw.url}/console/billing`);
  assert.equal(new URL(page.url()).pathname, '/console/login');

  await assertInvariants(assert, gw, accountId);
});

/** What sticks out sideways on the page: the page's own scroll width, and any element past the viewport's edges that no scrolling box holds. */
function overflow(page, vw) {
  return page.evaluate((vw) => {
    const out = [];
    if (window.innerWidth !== vw) out.push(`the viewport is ${window.innerWidth} px wide, not ${vw}`);
    const width = document.scrollingElement.scrollWidth;
    if (width > vw) out.push(`the page is ${width} px wide`);
    const inScroller = (el) => {
      for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        const o = window.getComputedStyle(p).overflowX;
        if (o === 'auto' || o === 'scroll') return true;
      }
      return false;
    };
    for (const el of document.querySelectorAll('body *')) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0 || inScroller(el)) continue;
      if (r.right > vw + 0.5 || r.left < -0.5) {
        out.push(`<${el.tagName.toLowerCase()}${el.className && typeof el.className === 'string' ? ` class="${el.className}"` : ''}> spans ${Math.round(r.left)}..${Math.round(r.right)}: ${(el.textContent ?? '').trim().slice(0, 40)}`);
      }
    }
    return out;
  }, vw);
}

test('every console page fits a 390-pixel-wide phone screen: nothing sticks out sideways, tables scroll inside their cards', async (t) => {
  mkdirSync(ARTIFACTS, { recursive: true });
  const gw = await startGateway(t, { embedded: true });
  const browser = await launch(t);
  // Not isMobile: a mobile viewport zooms out to fit what overflows, which would hide the overflow from the check.
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 });
  const page = await context.newPage();
  const check = async (name) => {
    await page.screenshot({ path: join(ARTIFACTS, `console-390-${name}.png`), fullPage: true });
    assert.deepEqual(await overflow(page, 390), [], `${name} at 390 px`);
  };

  await page.goto(`${gw.url}/console/login`);
  await check('login');
  await page.goto(`${gw.url}/status`);
  await check('status');
  await page.goto(`${gw.url}/console/signup`);
  await check('signup');
  const email = `phone-with-a-long-address-${randomBytes(4).toString('hex')}@example.com`;
  await page.fill('#email', email);
  await page.fill('#password', 'correct horse battery');
  await Promise.all([page.waitForURL('**/console/keys?done=welcome'), page.getByRole('button', { name: 'Create account' }).click()]);
  await check('keys-empty');
  await page.fill('#label', 'a phone key with a rather long label');
  await page.getByRole('button', { name: 'Create key' }).last().click();
  await page.waitForSelector('#new-key');
  await check('key-created');
  const key = await page.inputValue('#new-key');
  const prefix = key.slice(0, 12);
  const account = await gw.cli('account', 'list', '--email', email);
  await gw.cli('account', 'credit', account.accounts[0].account_id, '--amount', '5');
  for (let i = 0; i < 40 && (await (await gw.fetch('/svc/v1/key', { headers: bearer(key) })).json()).balance === 0; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal((await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() })).status, 200);

  // Every section is reachable from the header, the account page included, and "Log out" is on screen.
  await page.goto(`${gw.url}/console/keys`);
  await check('keys');
  for (const [name, path] of [['Usage', '/console/usage'], ['Billing', '/console/billing'], ['Account', '/console/account'], ['API keys', '/console/keys']]) {
    await page.getByRole('navigation').getByRole('link', { name, exact: true }).click();
    await page.waitForURL(`**${path}`);
    await check(name.toLowerCase().replace(' ', '-'));
  }
  const logout = await page.getByRole('button', { name: 'Log out', exact: true }).boundingBox();
  assert.ok(logout && logout.x >= 0 && logout.x + logout.width <= 390, `Log out is on screen: ${JSON.stringify(logout)}`);
  await page.goto(`${gw.url}/console/keys/${prefix}`);
  await check('key-edit');
  await page.goto(`${gw.url}/console/keys/${prefix}/revoke`);
  await check('key-revoke');
  await page.goto(`${gw.url}/console/keys/svc_live_nope`);
  await check('not-found');
  // The keys table is wider than a phone: it scrolls inside its card rather than stretching the page.
  await page.goto(`${gw.url}/console/keys`);
  const scroller = await page.locator('table').first().evaluate((t) => { const p = t.parentElement; return { box: p.clientWidth, content: p.scrollWidth, overflow: window.getComputedStyle(p).overflowX }; });
  assert.equal(scroller.overflow, 'auto');
  assert.ok(scroller.box <= 390, JSON.stringify(scroller));
  // The usage charts stay readable: their labels at least 10 px tall on screen, the chart scrolling inside its card.
  await page.goto(`${gw.url}/console/usage`);
  for (const id of ['by-key', 'by-product']) {
    const chart = await page.locator(`#${id} .chart-wrap`).evaluate((w) => {
      const labels = [...w.querySelectorAll('.axis text')].map((t) => t.getBoundingClientRect().height);
      // The newest days (the right end) show first; the older ones scroll into view.
      const days = [...w.querySelectorAll('.axis text[text-anchor=middle]')];
      const last = days.at(-1)?.getBoundingClientRect();
      const box = w.getBoundingClientRect();
      return { box: w.clientWidth, overflow: window.getComputedStyle(w).overflowX, smallest: Math.min(...labels), labels: labels.length,
        newestShown: last !== undefined && last.left >= box.left && last.right <= box.right,
        // ...and the amounts they stand for are on screen beside them.
        amountsShown: [...w.querySelectorAll('.axis text[text-anchor=start]')].some((t) => { const r = t.getBoundingClientRect(); return r.left >= box.left && r.right <= box.right; }) };
    });
    assert.ok(chart.labels > 0 && chart.smallest >= 10, `${id}: ${JSON.stringify(chart)}`);
    assert.ok(chart.newestShown && chart.amountsShown, `${id}: ${JSON.stringify(chart)}`);
    assert.ok(chart.box <= 390 && chart.overflow === 'auto', `${id}: ${JSON.stringify(chart)}`);
  }
  await page.screenshot({ path: join(ARTIFACTS, 'console-390-usage-charts.png'), fullPage: true });
});

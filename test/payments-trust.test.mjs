// Payments against hostile input: a config file names its provider (the sandbox only when flagged, and
// then it says so), return URLs stay on allowed origins, and only charges Tollgate made and recorded credit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startGateway, CLI, TEST_MODELS } from './helpers/gateway.mjs';
import { ConsoleClient } from './browser/client.mjs';

/** Runs `serve` on a config that should be refused; gives up (and kills it) after 15 s if it starts instead. */
function serveRefused(t, config) {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-pay-cfg-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'config.json');
  writeFileSync(path, JSON.stringify(config));
  return spawnSync(process.execPath, [CLI, 'serve', '--config', path, '--data-dir', dir, '--listen', '127.0.0.1:0'],
    { encoding: 'utf8', timeout: 15_000, env: { ...process.env, TOLLGATE_LOG_REQUESTS: '0' } });
}

// ---- the provider is named in a config file ------------------------------------------------------------

test('a config file that does not name its payment provider, or names the sandbox without allow_sandbox, is refused at start-up', (t) => {
  const base = { listen: '127.0.0.1:0', upstreams: { sim: { sim: {} } }, models: TEST_MODELS };
  for (const [payments, pattern] of [
    [undefined, /\/payments\/provider: a config file must name its payment provider/],
    [{ currency: 'usd' }, /\/payments\/provider: a config file must name its payment provider/],
    [{ provider: 'sandbox' }, /\/payments\/allow_sandbox: .*no real money/],
    [{ provider: 'sandbox', allow_sandbox: false }, /\/payments\/allow_sandbox: .*no real money/],
  ]) {
    const r = serveRefused(t, { ...base, ...(payments ? { payments } : {}) });
    assert.doesNotMatch(r.stdout, /"msg":"listening"/, `${JSON.stringify(payments)}: the gateway must not start`);
    assert.equal(r.status, 2, `${JSON.stringify(payments)}: serve refused to start (it exited with ${r.status}, signal ${r.signal})`);
    assert.match(r.stderr, pattern, JSON.stringify(payments));
  }
});

test('a config file running the sandbox logs a warning at start and its checkout pages say no real money is taken', async (t) => {
  const gw = await startGateway(t, { store: 'pglite' });
  const warning = gw.output.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
    .find((j) => j.level === 'warn' && /sandbox/.test(j.msg));
  assert.ok(warning, `a warning line at start:\n${gw.output.stdout}`);
  assert.match(warning.msg, /no real money/);

  const c = new ConsoleClient(gw.url);
  await c.signup(`p${randomBytes(5).toString('hex')}@example.com`);
  const billing = await c.request('/console/billing');
  assert.equal(billing.status, 200);
  assert.match(billing.text, /<div class="notice warn" role="status">[^<]*sandbox[^<]*no real money is taken/);
  const topup = await c.post('/console/billing/topup', { amount: '10' }, '/console/billing');
  assert.equal(topup.status, 303);
  const page = await c.request(new URL(topup.headers.location).pathname);
  assert.equal(page.status, 200);
  assert.match(page.text, /<div class="banner" role="note">Sandbox — no real charge\. No real money is taken/);
});

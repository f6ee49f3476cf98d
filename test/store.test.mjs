// The ledger on both stores: idempotent settles, reused request ids, group commits, balance == Σ ledger.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { freshDatabase } from './helpers/gateway.mjs';
import { openPglite, openPostgres } from '../dist/store/db.js';
import { Settler } from '../dist/ledger/settle.js';
import { createAccount } from '../dist/store/accounts.js';
import { createKey, keyByHash, revokeKey } from '../dist/store/keys.js';
import { hashKey } from '../dist/store/ids.js';
import { putCustomer, saveCard, putAutoTopup, claimCharge, chargeSucceeded } from '../dist/billing/store.js';

const execFileP = promisify(execFile);

const STORES = {
  async pglite(t) {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-store-'));
    const db = await openPglite(dir);
    t.after(async () => { await db.close(); rmSync(dir, { recursive: true, force: true }); });
    return db;
  },
  async postgres(t) {
    const fresh = await freshDatabase();
    const db = await openPostgres(fresh.url, 8);
    t.after(async () => { await db.close(); await fresh.drop(); });
    return db;
  },
};

const quiet = { balance() {}, spend() {} };

async function totals(db, accountId) {
  const r = await db.query(`SELECT (SELECT balance_nd FROM accounts WHERE id = $1) AS balance,
    (SELECT coalesce(sum(amount_nd), 0)::bigint FROM ledger WHERE account_id = $1) AS sum,
    (SELECT count(*)::int FROM ledger WHERE account_id = $1) AS n`, [accountId]);
  return r.rows[0];
}

for (const [name, open] of Object.entries(STORES)) {
  test(`a retried settle bills once and a reused request id bills again (${name})`, async (t) => {
    const db = await open(t);
    const s = new Settler(db, quiet);
    const acct = await createAccount(db, 'a@example.com');
    const { record: key } = await createKey(db, { accountId: acct.id });
    await s.submit({ idemKey: 'credit:1', nonce: 'c1', accountId: acct.id, keyId: null, kind: 'credit', amount: 5_000_000_000n, reason: 'test' });
    const debit = { idemKey: 'req_same', nonce: 'n1', accountId: acct.id, keyId: key.id, kind: 'debit', amount: 1234n, reason: 'chat' };
    const first = await s.submit(debit);
    const retry = await s.submit(debit);
    assert.equal(first.applied, true);
    assert.equal(retry.applied, false);
    const reused = await s.submit({ ...debit, nonce: 'n2' });
    assert.equal(reused.applied, true);
    assert.equal(reused.idemKey, 'req_same~n2');
    const tt = await totals(db, acct.id);
    assert.equal(tt.balance, 5_000_000_000n - 2468n);
    assert.equal(tt.balance, tt.sum);
    assert.equal(tt.n, 3);
  });

  test(`a debit naming an account or key the store does not have is refused as a foreign key refuses it (23503), and the rest of its group commits (${name})`, async (t) => {
    const db = await open(t);
    const s = new Settler(db, quiet);
    const acct = await createAccount(db, `r${name}@example.com`);
    const { record: key } = await createKey(db, { accountId: acct.id });
    await s.submit({ idemKey: 'credit:r', nonce: 'c', accountId: acct.id, keyId: null, kind: 'credit', amount: 1_000_000n, reason: 'test' });
    const debit = (idemKey, accountId, keyId) => s.submit({ idemKey, nonce: 'n', accountId, keyId, kind: 'debit', amount: 1000n, reason: 'chat' });
    // One turn: one group holds two honest debits, one for an account nobody created and one for a key nobody created.
    const [ok1, noAccount, noKey, ok2] = await Promise.allSettled([
      debit('req_ok1', acct.id, key.id), debit('req_no_account', 'acct_nobody', null), debit('req_no_key', acct.id, 'key_nobody'), debit('req_ok2', acct.id, null)]);
    for (const [r, what] of [[noAccount, 'an unknown account'], [noKey, 'an unknown key']]) {
      assert.equal(r.status, 'rejected', `${what} was refused`);
      assert.equal(r.reason.name, 'Error');
      assert.match(r.reason.message, /the ledger refuses this entry/);
      assert.equal(r.reason.cause.code, '23503', `${what}: SQLSTATE ${r.reason.cause.code}`);
    }
    assert.equal(ok1.status, 'fulfilled');
    assert.equal(ok2.status, 'fulfilled');
    assert.equal(ok1.value.applied && ok2.value.applied, true);
    const orphans = await db.query(`SELECT idem_key FROM ledger WHERE idem_key IN ('req_no_account', 'req_no_key')`);
    assert.deepEqual(orphans.rows, [], 'no ledger row names what does not exist');
    const tt = await totals(db, acct.id);
    assert.equal(tt.balance, 1_000_000n - 2000n);
    assert.equal(tt.balance, tt.sum);
  });

  test(`group commits are paced: the first debit commits at once, the ones that follow within the pace go in one commit (${name})`, async (t) => {
    const db = await open(t);
    const s = new Settler(db, quiet, 300);
    const acct = await createAccount(db, `p${name}@example.com`);
    await s.submit({ idemKey: 'c', nonce: 'c', accountId: acct.id, keyId: null, kind: 'credit', amount: 1_000_000n, reason: 'top-up' });
    assert.equal(s.commits, 1, 'the first one was not held back');
    // One request at a time: five debits 2 ms apart, each after the one before is queued.
    const landed = [];
    for (let i = 0; i < 5; i++) {
      landed.push(s.submit({ idemKey: `d${i}`, nonce: `n${i}`, accountId: acct.id, keyId: null, kind: 'debit', amount: 1000n, reason: 'chat' }));
      await new Promise((r) => setTimeout(r, 2));
    }
    await Promise.all(landed);
    assert.equal(s.commits, 2, `the five went in one group commit, not ${s.commits - 1}`);
    const tt = await totals(db, acct.id);
    assert.equal(tt.balance, 1_000_000n - 5000n);
    assert.equal(tt.balance, tt.sum);
  });

  test(`within the pace, debits wait for the next one after it (a response's end), not for a timer mid-request; a trickle's last waits at most one pace more; a reader waiting for the ledger hurries it (${name})`, async (t) => {
    const db = await open(t);
    const s = new Settler(db, quiet, 200);
    const acct = await createAccount(db, `w${name}@example.com`);
    // A credit's commit starts at once (none started in the last pace), so the pace runs from its submit, and the
    // fallback for a debit submitted within the pace comes two paces after it, however long that commit takes.
    // The scenario needs the debit submitted well within the pace: on a loaded machine one PGlite commit alone
    // once took over 100 ms, so a credit that landed late is followed by another (its own commit, at once).
    let paceFrom = 0;
    let credited = 0n;
    for (let i = 0; i < 5; i++) {
      paceFrom = performance.now();
      await s.submit({ idemKey: `c${i}`, nonce: `c${i}`, accountId: acct.id, keyId: null, kind: 'credit', amount: 1_000_000n, reason: 'top-up' });
      credited += 1_000_000n;
      if (performance.now() - paceFrom < 120) break;
      await new Promise((r) => setTimeout(r, 210)); // past the pace: the next credit commits at once
    }
    const base = s.commits;
    const debit = (i) => ({ idemKey: `w${i}`, nonce: `w${i}`, accountId: acct.id, keyId: null, kind: 'debit', amount: 1000n, reason: 'chat' });
    const first = s.submit(debit(0));
    // Past the pace with nothing else submitted: no commit started at the pace's end (counted from the last
    // credit's start, before the fallback at two paces).
    await new Promise((r) => setTimeout(r, Math.max(0, paceFrom + 300 - performance.now())));
    assert.equal(s.commits, base, 'the paced debit was committed by a timer at the pace, not with the next debit');
    // The next debit starts the commit in its own turn, with the one waiting.
    const second = s.submit(debit(1));
    // pending: the debits queued, plus one while a commit runs (2 before it starts, 1 or 0 once it has).
    // It starts a millisecond on, once the response that submitted the debit is out (Settler.schedule).
    // The start is what tells: how long the commit itself then takes is the store's (on a loaded machine, PGlite's
    // commit alone took over 150 ms once, in the whole suite's run, though it had started within these 20 ms).
    await new Promise((r) => setTimeout(r, 20));
    assert.ok(s.pending <= 1, 'the commit did not start right after the debit after the pace: it waited for a timer');
    await Promise.all([first, second]);
    assert.equal(s.commits, base + 1, 'the two debits went in one commit');
    // A trickle's last debit: nothing follows it, so it lands by the fallback, within two paces of the last start.
    const t1 = performance.now();
    await s.submit(debit(2));
    const waited = performance.now() - t1;
    assert.ok(waited >= 150 && waited < 600, `the last debit of a trickle landed after ${waited.toFixed(0)} ms`);
    assert.equal(s.commits, base + 2);
    // A reader waiting for the ledger (Committer.settled, as key inspection does) hurries the waiting debit: no pace.
    // The last commit started just now, so without the hurry this one would wait out most of the 200 ms pace.
    // (`pending` cannot tell a queued commit from a running one, and a fast store may have finished it within two
    // turns: the time it took is what tells.)
    const t3 = performance.now();
    const fourth = s.submit(debit(3));
    s.hurry();
    await fourth;
    const hurried = performance.now() - t3;
    assert.ok(hurried < 150, `a hurried commit took ${hurried.toFixed(0)} ms: it waited for the pace`);
    assert.equal(s.commits, base + 3);
    const tt = await totals(db, acct.id);
    assert.equal(tt.balance, credited - 4000n);
    assert.equal(tt.balance, tt.sum);
  });

  test(`the pace never caps throughput: full batches waiting commit at once, without waiting out the pace (${name})`, async (t) => {
    const db = await open(t);
    const s = new Settler(db, quiet, 5_000);
    const acct = await createAccount(db, `q${name}@example.com`);
    await s.submit({ idemKey: 'c', nonce: 'c', accountId: acct.id, keyId: null, kind: 'credit', amount: 1_000_000_000n, reason: 'top-up' });
    // Right after a commit, so the pace (5 s) would hold the next one back: two full batches (512 each) arrive.
    const t0 = Date.now();
    const landed = [];
    for (let i = 0; i < 1024; i++) landed.push(s.submit({ idemKey: `b${i}`, nonce: `n${i}`, accountId: acct.id, keyId: null, kind: 'debit', amount: 1000n, reason: 'chat' }));
    await Promise.all(landed);
    assert.ok(Date.now() - t0 < 4_000, `a backlog of full batches waited ${Date.now() - t0} ms for the pace`);
    assert.equal(s.commits, 3, 'the credit, then the two batches');
    const tt = await totals(db, acct.id);
    assert.equal(tt.balance, 1_000_000_000n - 1_024_000n);
    assert.equal(tt.balance, tt.sum);
  });

  test(`hundreds of concurrent settles group-commit and keep balance equal to the ledger (${name})`, async (t) => {
    const db = await open(t);
    const s = new Settler(db, quiet);
    const accts = await Promise.all([0, 1, 2].map((i) => createAccount(db, `g${i}@example.com`)));
    const keys = await Promise.all(accts.map((a) => createKey(db, { accountId: a.id })));
    const jobs = [];
    for (let i = 0; i < 300; i++) {
      const a = accts[i % 3];
      jobs.push(s.submit({ idemKey: `r${i}`, nonce: `n${i}`, accountId: a.id, keyId: keys[i % 3].record.id, kind: 'debit', amount: BigInt(1000 + i), reason: 'chat' }));
      if (i % 50 === 0) jobs.push(s.submit({ idemKey: `c${i}`, nonce: `c${i}`, accountId: a.id, keyId: null, kind: 'credit', amount: 1_000_000n, reason: 'top-up' }));
      if (i % 7 === 0) jobs.push(s.submit({ idemKey: `r${i}`, nonce: `n${i}`, accountId: a.id, keyId: keys[i % 3].record.id, kind: 'debit', amount: BigInt(1000 + i), reason: 'chat' }));
    }
    await Promise.all(jobs);
    assert.ok(s.commits < jobs.length / 4, `grouped: ${s.commits} commits for ${jobs.length} entries`);
    let debited = 0n;
    for (let i = 0; i < 300; i++) debited += BigInt(1000 + i);
    let all = 0n;
    for (const a of accts) {
      const tt = await totals(db, a.id);
      assert.equal(tt.balance, tt.sum);
      all += tt.sum;
    }
    assert.equal(all, 6n * 1_000_000n - debited);
    const spend = await db.query(`SELECT period, sum(spent_nd)::bigint AS s FROM key_spend GROUP BY period ORDER BY period`);
    assert.deepEqual(spend.rows.map((r) => [r.period, r.s]), [['day', debited], ['month', debited]]);
  });

  test(`keys are stored only as a SHA-256 hash with a 12-character prefix (${name})`, async (t) => {
    const db = await open(t);
    const acct = await createAccount(db, 'k@example.com');
    const { key, record } = await createKey(db, { accountId: acct.id, label: 'x', scopes: ['llm'] });
    assert.match(key, /^svc_live_[0-9A-Za-z]{40}$/);
    assert.equal(record.prefix, key.slice(0, 12));
    const raw = await db.query('SELECT * FROM api_keys');
    assert.ok(!JSON.stringify(raw.rows, (_k, v) => (typeof v === 'bigint' ? String(v) : v)).includes(key.slice(12)), 'the secret part is not stored');
    assert.equal((await keyByHash(db, hashKey(key))).id, record.id);
    const rev = await revokeKey(db, record.prefix);
    assert.ok(rev.revokedAt instanceof Date);
    assert.ok(rev.version > record.version, 'a change bumps the version the caches follow');
  });

  test(`the ledger's idem_key has one index, unique by text pattern: it refuses a duplicate, is the settle's conflict arbiter, and a receipt's prefix search reads it (${name})`, async (t) => {
    const db = await open(t);
    const onIdem = await db.query(`SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'ledger' AND indexdef LIKE '%(idem_key%'`);
    assert.deepEqual(onIdem.rows.map((r) => r.indexname), ['ledger_idem_key'], 'one index on idem_key (a row inserts into one, not two)');
    assert.match(onIdem.rows[0].indexdef, /^CREATE UNIQUE INDEX .*\(idem_key text_pattern_ops\)$/);
    const s = new Settler(db, quiet);
    const acct = await createAccount(db, 'i@example.com');
    await s.submit({ idemKey: 'credit:i', nonce: 'c', accountId: acct.id, keyId: null, kind: 'credit', amount: 1_000_000n, reason: 'test' });
    for (const idemKey of ['req_abc', 'req_abc#1', 'req_abc#2', 'req_abcd']) {
      await s.submit({ idemKey, nonce: 'n', accountId: acct.id, keyId: null, kind: 'debit', amount: 10n, reason: 'chat' });
    }
    // The settle's ON CONFLICT (idem_key): a retry of a stored debit is recognised, not stored again or refused.
    assert.equal((await s.submit({ idemKey: 'req_abc#1', nonce: 'n', accountId: acct.id, keyId: null, kind: 'debit', amount: 10n, reason: 'chat' })).applied, false);
    await assert.rejects(db.query(`INSERT INTO ledger (account_id, idem_key, kind, amount_nd, reason) VALUES ($1, 'req_abc', 'debit', -1, 'x')`, [acct.id]),
      (e) => e.code === '23505', 'a second row under one idem_key is refused');
    const tt = await totals(db, acct.id);
    assert.equal(tt.n, 5);
    assert.equal(tt.balance, tt.sum);
    // The receipt's lookup: the request's own row and its parts by prefix, through the index.
    await db.tx(async (c) => {
      await c.query('SET LOCAL enable_seqscan = off');
      const plan = (await c.query(`EXPLAIN SELECT idem_key FROM ledger WHERE idem_key = 'req_abc' OR idem_key LIKE 'req_abc#%'`)).rows.map((r) => r['QUERY PLAN']).join('\n');
      assert.match(plan, /ledger_idem_key/, plan);
      const rows = await c.query(`SELECT idem_key FROM ledger WHERE idem_key = 'req_abc' OR idem_key LIKE 'req_abc#%' ORDER BY idem_key`);
      assert.deepEqual(rows.rows.map((r) => r.idem_key), ['req_abc', 'req_abc#1', 'req_abc#2']);
    });
  });
}

test('a ledger made before migration 018 keeps its rows and its uniqueness when its two idem_key indexes become one (postgres)', async (t) => {
  const fresh = await freshDatabase();
  t.after(() => fresh.drop());
  // The database as a build before 018 left it: migrations 001-017 applied and recorded, with ledger rows in it.
  const dir = new URL('../dist/store/migrations/', import.meta.url);
  const before = readdirSync(dir).filter((f) => f.endsWith('.sql') && f < '018').sort();
  const { default: pg } = await import('pg');
  const c = new pg.Client({ connectionString: fresh.url });
  await c.connect();
  try {
    await c.query('CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())');
    for (const f of before) {
      await c.query(readFileSync(new URL(f, dir), 'utf8'));
      await c.query('INSERT INTO schema_migrations (name) VALUES ($1)', [f]);
    }
    await c.query(`INSERT INTO accounts (id, email, balance_nd) VALUES ('acct_old', 'old@example.com', 0)`);
    await c.query(`INSERT INTO ledger (account_id, idem_key, kind, amount_nd, reason) VALUES ('acct_old', 'req_old', 'debit', -5, 'chat'), ('acct_old', 'req_old#1', 'debit', -6, 'chat')`);
    const old = await c.query(`SELECT indexname FROM pg_indexes WHERE tablename = 'ledger' AND indexdef LIKE '%(idem_key%' ORDER BY indexname`);
    assert.deepEqual(old.rows.map((r) => r.indexname), ['ledger_idem_key_key', 'ledger_idem_prefix']);
  } finally { await c.end(); }
  const db = await openPostgres(fresh.url, 2);
  t.after(() => db.close());
  const now = await db.query(`SELECT indexname FROM pg_indexes WHERE tablename = 'ledger' AND indexdef LIKE '%(idem_key%'`);
  assert.deepEqual(now.rows.map((r) => r.indexname), ['ledger_idem_key']);
  assert.deepEqual((await db.query('SELECT idem_key FROM ledger ORDER BY idem_key')).rows.map((r) => r.idem_key), ['req_old', 'req_old#1']);
  await assert.rejects(db.query(`INSERT INTO ledger (account_id, idem_key, kind, amount_nd, reason) VALUES ('acct_old', 'req_old#1', 'debit', -1, 'x')`), (e) => e.code === '23505');
});

test('one dip under the auto top-up threshold is claimed for a charge once, however many instances see it (postgres)', async (t) => {
  const fresh = await freshDatabase();
  // Four instances: four pools on one database, as separate gateway processes would have.
  const dbs = await Promise.all(Array.from({ length: 4 }, () => openPostgres(fresh.url, 4)));
  t.after(async () => { await Promise.all(dbs.map((d) => d.close())); await fresh.drop(); });
  const acct = await createAccount(dbs[0], 'dip@example.com');
  await putCustomer(dbs[0], acct.id, 'stripe', 'cus_dip');
  await saveCard(dbs[0], acct.id, 'stripe', 'cus_dip', 'pm_card_visa', new Date());
  await putAutoTopup(dbs[0], acct.id, true, 5_000_000_000n, 20_000_000_000n);
  const claimAll = () => Promise.all(Array.from({ length: 40 }, (_, i) => claimCharge(dbs[i % dbs.length], acct.id, 'stripe')));
  const claims = (await claimAll()).filter(Boolean);
  assert.equal(claims.length, 1, 'the balance (0) is under the threshold: exactly one claim');
  assert.equal(claims[0].attempt, 1n);
  assert.equal(claims[0].amount, 20_000_000_000n);
  assert.equal((await claimAll()).filter(Boolean).length, 0, 'while that charge is in flight, no second one');
  await chargeSucceeded(dbs[1], acct.id, 1n, 'pi_1');
  const next = (await claimAll()).filter(Boolean);
  assert.equal(next.length, 1, 'settled and still under the threshold: the next attempt, once');
  assert.equal(next[0].attempt, 2n);
});

test('a process run as `node --input-type=module -e`, with a V8 option or without, opens the embedded store and hashes a password: its threads load (pglite)', async (t) => {
  // Worker threads inherit the parent's Node options; --input-type is for string input only and fails a
  // thread whose entry is a file. A fresh clone's test helper opens its first PGlite this way. A thread given
  // its own options (to leave --input-type out) refused a V8 option among them: ERR_WORKER_INVALID_EXEC_ARGV.
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-input-type-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const dist = (f) => JSON.stringify(new URL(`../dist/${f}`, import.meta.url).href);
  const code = `const { openPglite } = await import(${dist('store/db.js')}); const { hashPassword, verifyPassword } = await import(${dist('console/hash.js')});
const db = await openPglite(process.argv[1]); const { rows } = await db.query('SELECT 6 * 7 AS n'); await db.close();
const h = await hashPassword('a long enough password'); console.log(JSON.stringify({ n: rows[0].n, ok: await verifyPassword('a long enough password', h) }));`;
  for (const flags of [['--input-type=module'], ['--input-type=module', '--max-old-space-size=512']]) {
    rmSync(dir, { recursive: true, force: true });
    const { stdout } = await execFileP(process.execPath, [...flags, '-e', code, dir], { timeout: 120_000 });
    assert.deepEqual(JSON.parse(stdout.trim().split('\n').at(-1)), { n: 42, ok: true }, flags.join(' '));
  }
});

test('the embedded store survives its connection being replaced: the next statement, a named one too, runs (pglite)', async (t) => {
  const db = await STORES.pglite(t);
  const named = () => db.query({ name: 'tollgate_test_named', text: 'SELECT $1::int + 1 AS n', values: [41] });
  assert.equal((await named()).rows[0].n, 42);
  for (let i = 0; i < 3; i++) {
    // The pool's one connection dropped (as after an error) and at once replaced by a new one.
    const c = await db.pool.connect();
    c.release(true);
    assert.equal((await named()).rows[0].n, 42, `after replacement ${i + 1}`);
  }
});

test('the embedded store runs its statements beside the event loop: a long one holds no timer (pglite)', async (t) => {
  const db = await STORES.pglite(t);
  // What a request meets while the store works: each 10 ms timer's lateness, sampled through the statement.
  let last = performance.now();
  let worst = 0;
  const tick = setInterval(() => { const now = performance.now(); worst = Math.max(worst, now - last - 10); last = now; }, 10);
  const started = performance.now();
  await db.query('SELECT count(*) FROM generate_series(1, 3000000) g WHERE g % 7 = 3');
  const took = performance.now() - started;
  clearInterval(tick);
  assert.ok(took > 300, `the statement ran long enough to tell (${took.toFixed(0)} ms)`);
  assert.ok(worst < Math.min(150, took / 3), `no timer was held while it ran: the latest fired ${worst.toFixed(0)} ms late, the statement took ${took.toFixed(0)} ms`);
});

test('which machines compile PGlite with Liftoff alone: x64 with SSE4.1 and arm64; x64 without it, or unread, and other architectures keep V8\'s tiering', async () => {
  const { liftoffCompilesPglite } = await import('../dist/store/pglite-tier.js');
  const cpu = (flags) => () => `processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: ${flags}\nbugs\t\t: sysret_ss_attrs\n`;
  assert.equal(liftoffCompilesPglite('x64', cpu('fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 popcnt avx')), true);
  // Without SSE4.1, Liftoff cannot compile all of PGlite, and under --liftoff-only that aborts the process.
  assert.equal(liftoffCompilesPglite('x64', cpu('fpu sse sse2 ssse3 cx16')), false);
  assert.equal(liftoffCompilesPglite('x64', cpu('fpu sse sse2 sse4_1_like')), false);
  assert.equal(liftoffCompilesPglite('x64', () => ''), false);
  assert.equal(liftoffCompilesPglite('arm64', () => ''), true);
  assert.equal(liftoffCompilesPglite('arm', cpu('neon vfpv4')), false);
});

test('while the embedded store opens, V8 compiles WebAssembly with its baseline compiler only (PGlite is never tiered up), and modules compiled after it are tiered up as before (pglite)', async (t) => {
  const { liftoffCompilesPglite } = await import('../dist/store/pglite-tier.js');
  if (!liftoffCompilesPglite()) return t.skip('this machine keeps V8\'s tiering for PGlite (no SSE4.1 on x64, or another architecture)');
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-liftoff-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const first = await openPglite(join(dir, 'store')); // made here, so the open below starts its thread at once (no initdb first)
  await first.close();
  const dist = (f) => JSON.stringify(new URL(`../dist/${f}`, import.meta.url).href);
  // A module with one hot function (a counting loop); `name` makes each module's bytes differ, so V8 caches none.
  const code = `import { setFlagsFromString } from 'node:v8';
const { openPglite } = await import(${dist('store/db.js')});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const hot = (name) => {
  const n = [...name].map((c) => c.charCodeAt(0));
  const bytes = new Uint8Array([0,97,115,109,1,0,0,0, 1,6,1,96,1,127,1,127, 3,2,1,0, 7,4 + n.length,1,n.length,...n,0,0,
    10,27,1,25,1,1,127,3,64,32,1,32,0,106,33,1,32,0,65,1,107,34,0,13,0,11,32,1,11]);
  const f = new WebAssembly.Instance(new WebAssembly.Module(bytes)).exports[name];
  for (let i = 0; i < 200; i++) f(100000);
  return f;
};
const tieredUp = async (f) => { for (let i = 0; i < 100 && %IsLiftoffFunction(f); i++) { await sleep(50); for (let j = 0; j < 50; j++) f(100000); } return !%IsLiftoffFunction(f); };
// Does this V8 honour --liftoff-only set at run time? (Node 24's does not: there the store cannot use it.)
setFlagsFromString('--liftoff-only'); const probe = hot('probe'); await sleep(300); const honoured = %IsLiftoffFunction(probe); setFlagsFromString('--no-liftoff-only --wasm-dynamic-tiering');
if (!honoured) { console.log(JSON.stringify({ honoured })); process.exit(0); }
const opening = openPglite(process.argv[2]);
const during = hot('during'); // compiled and run hot before the store's thread can say it is ready
await sleep(300);
const liftoffOnlyWhileOpening = %IsLiftoffFunction(during);
const db = await opening;
const { rows } = await db.query('SELECT 6 * 7 AS n');
const tieredUpAfter = await tieredUp(hot('after'));
// A module compiled while the store opened (as PGlite's was) stays on Liftoff however hot it runs later.
const duringTieredUpLater = await tieredUp(during);
await db.close();
console.log(JSON.stringify({ honoured, liftoffOnlyWhileOpening, tieredUpAfter, duringTieredUpLater, n: rows[0].n }));`;
  const script = join(dir, 'tiers.mjs'); // a file, not -e: the store's thread refuses V8 options given explicitly (threads.ts)
  writeFileSync(script, code);
  const { stdout } = await execFileP(process.execPath, ['--allow-natives-syntax', script, join(dir, 'store')], { timeout: 120_000 });
  const out = JSON.parse(stdout.trim().split('\n').at(-1));
  if (!out.honoured) return t.skip(`this V8 (${process.versions.v8}) ignores --liftoff-only set at run time: PGlite is tiered up as before`);
  assert.deepEqual(out, { honoured: true, liftoffOnlyWhileOpening: true, tieredUpAfter: true, duringTieredUpLater: false, n: 42 });
});

test('the child process that creates a new embedded data dir also applies every migration to it, so the gateway\'s own PostgreSQL never runs their DDL (pglite)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-init-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const pgDir = join(dir, 'pg');
  const t0 = performance.now();
  await execFileP(process.execPath, [new URL('../dist/store/pglite-init.js', import.meta.url).pathname, pgDir], { timeout: 120_000 });
  const took = performance.now() - t0;
  // Read with a bare PGlite: openPglite would apply the migrations itself.
  const { PGlite } = await import('@electric-sql/pglite');
  const raw = await PGlite.create(pgDir);
  t.after(() => raw.close());
  const files = readdirSync(new URL('../dist/store/migrations/', import.meta.url)).filter((f) => f.endsWith('.sql')).sort();
  const { rows } = await raw.query('SELECT name FROM schema_migrations ORDER BY name');
  assert.deepEqual(rows.map((r) => r.name), files);
  assert.equal((await raw.query("SELECT to_regclass('ledger') IS NOT NULL AS ok")).rows[0].ok, true);
  assert.ok(took < 60_000, `created and migrated in ${Math.round(took)} ms`);
});

// What a ledger row costs PostgreSQL in the group commit: the settle statement (src/ledger/settle.ts) on a new
// database each run, through Settler, in groups of a fixed size; PostgreSQL's backend CPU (from /proc) and this
// process's CPU per entry. `--dist PATH` alternates with another build's dist/ (its own migrations and statement).
// node bench/settle-rows.mjs [--entries 128] [--total 40000] [--pairs 3] [--dist PATH]
import pg from 'pg';
import { resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { usage } from './lib.mjs';

const opt = (name, dflt) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : dflt; };
const B = Number(opt('--entries', '128'));
const N = Number(opt('--total', '40000'));
const PAIRS = Number(opt('--pairs', '3'));
const OTHER = opt('--dist', null);
const ADMIN = process.env.PG_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const builds = [['this build', new URL('../dist/', import.meta.url).href]];
if (OTHER) builds.push([OTHER, new URL(`file://${resolve(OTHER)}/`).href]);

// A chat's debit as the exchange makes it (the usage as bench/settle-args.mjs has it).
const entry = (accountId, keyId) => ({
  idemKey: `chatcmpl-${randomBytes(12).toString('base64url')}`, nonce: randomBytes(8).toString('base64url'), accountId, keyId, kind: 'debit',
  amount: 123_456n, reason: 'usage', model: 'sim-chat', at: new Date(),
  usage: { input_tokens: 14, output_tokens: 16, prices: { input_per_mtok: '0.30', output_per_mtok: '2.50' }, started_at: new Date().toISOString(), upstream: 'sim', route: '/v1/chat/completions' },
});

async function run(label, dist) {
  const { openPostgres } = await import(`${dist}store/db.js`);
  const { migrate } = await import(`${dist}store/migrate.js`);
  const { createAccount } = await import(`${dist}store/accounts.js`);
  const { createKey } = await import(`${dist}store/keys.js`);
  const { Settler } = await import(`${dist}ledger/settle.js`);
  const name = `tg_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const db = await openPostgres(ADMIN.replace(/\/[^/]*$/, `/${name}`), 1);
  try {
    await migrate(db);
    const acct = await createAccount(db, 'bench@example.com');
    const { record: key } = await createKey(db, { accountId: acct.id });
    const pid = (await db.query('SELECT pg_backend_pid() AS p')).rows[0].p;
    const s = new Settler(db, { balance() {}, spend() {} });
    const group = () => Promise.all(Array.from({ length: B }, () => s.submit(entry(acct.id, key.id))));
    for (let i = 0; i < 2000 / B; i++) await group(); // warm: the statement planned, the caches filled
    const t0 = usage(pid).cpu; const c0 = process.cpuUsage();
    for (let i = 0; i < N / B; i++) await group();
    const backend = ((usage(pid).cpu - t0) * 1e6) / N;
    const c = process.cpuUsage(c0);
    console.log(`${label}: ${B} entries a commit, PostgreSQL backend ${backend.toFixed(1)} µs per entry, this process ${((c.user + c.system) / N).toFixed(1)} µs per entry (making the entries included)`);
  } finally {
    await db.close();
    await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
    await admin.end();
  }
}

for (let p = 0; p < PAIRS; p++) for (const [label, dist] of builds) await run(label, dist);

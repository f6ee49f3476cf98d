// What a second index on the ledger's idem_key costs the settle path: group commits of debits with one index on it (as
// migration 018 leaves the ledger: unique, by text pattern) and with two (as 001 and 013 left it: a plain index by the
// database's collation beside it), on PostgreSQL. bench/settle-rows.mjs --dist measures PostgreSQL's own CPU instead.
// node bench/ledger-index.mjs [entries=20000] [group=256]: alternates rounds with one and two; prints µs per debit.
import { freshDatabase } from '../test/helpers/gateway.mjs';
import { openPostgres } from '../dist/store/db.js';
import { Settler } from '../dist/ledger/settle.js';

const N = Number(process.argv[2] ?? 20_000);
const GROUP = Number(process.argv[3] ?? 256);
const fresh = await freshDatabase();
const db = await openPostgres(fresh.url, 4);
try {
  await db.query("INSERT INTO accounts (id, email, balance_nd) VALUES ('acct_bench', 'bench@example.com', 0)");
  const settler = new Settler(db, { balance() {}, spend() {} });
  const usage = { input_tokens: 12, output_tokens: 30, basis: 'exact', prices: { input_per_mtok: '0.3', output_per_mtok: '2.5' }, started_at: new Date().toISOString() };
  let seq = 0;
  const round = async () => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i += GROUP) {
      const batch = [];
      for (let j = 0; j < GROUP && i + j < N; j++) {
        batch.push(settler.submit({ idemKey: `req_${(seq++).toString(36).padStart(8, '0')}bench`, nonce: 'n', accountId: 'acct_bench', keyId: null, kind: 'debit', amount: 78600n, reason: 'chat.completions', model: 'sim-chat', usage }));
      }
      await Promise.all(batch);
    }
    return Number(process.hrtime.bigint() - t0) / 1e3 / N;
  };
  const results = { one: [], two: [] };
  for (let r = 0; r < 3; r++) {
    await db.query('DROP INDEX IF EXISTS ledger_idem_plain');
    results.one.push(await round());
    await db.query('CREATE INDEX ledger_idem_plain ON ledger (idem_key)');
    results.two.push(await round());
  }
  const med = (a) => [...a].sort((x, y) => x - y)[1].toFixed(1);
  console.log(JSON.stringify({ entries_per_round: N, group: GROUP, us_per_debit_one_index: results.one.map((x) => +x.toFixed(1)), us_per_debit_two_indexes: results.two.map((x) => +x.toFixed(1)), median_one: med(results.one), median_two: med(results.two) }));
} finally {
  await db.close?.();
  await fresh.drop();
}

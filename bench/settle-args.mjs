// What building the group commit's arguments costs per entry: ten arrays through pg's own escaping (as before) against one JSON array (src/ledger/settle.ts).
// `node bench/settle-args.mjs [entries per commit]`: CPU µs per entry, each way twice, alternating.
import pgUtils from 'pg/lib/utils.js';
const N = Number(process.argv[2] ?? 3);
const mk = (i) => ({ idemKey: `chatcmpl-${i}abcdef0123456789abcd`, nonce: `n${i}x9f8e7d6c5b4a3`, accountId: 'acct_0123456789abcdef', keyId: 'key_0123456789abcdef', kind: 'debit', amount: 123456n + BigInt(i), reason: 'usage', model: 'sim-chat',
  usage: { input_tokens: 14, output_tokens: 16, prices: { input_per_mtok: '0.30', output_per_mtok: '2.50' }, started_at: '2026-11-26T19:00:00.000Z', upstream: 'sim', route: '/v1/chat/completions' }, at: new Date() });
const entries = Array.from({ length: N }, (_, i) => mk(i));
const signed = (e) => (e.kind === 'credit' ? e.amount : -e.amount);
const arrays = () => { const v = [entries.map((e) => e.idemKey), entries.map((e) => e.nonce), entries.map((e) => e.accountId), entries.map((e) => e.keyId),
  entries.map((e) => e.kind), entries.map((e) => signed(e).toString()), entries.map((e) => e.reason), entries.map((e) => e.model ?? null), entries.map((e) => (e.usage === undefined ? null : JSON.stringify(e.usage))),
  entries.map((e) => (e.at ?? new Date()).toISOString())]; return v.map((a) => pgUtils.prepareValue(a)); };
const json = () => { const rows = new Array(entries.length); for (let i = 0; i < entries.length; i++) { const e = entries[i]; rows[i] = { i: e.idemKey, n: e.nonce, a: e.accountId, k: e.keyId, t: e.kind, m: signed(e).toString(), r: e.reason, o: e.model ?? null, u: e.usage ?? null, c: (e.at ?? new Date()).toISOString() }; } return JSON.stringify(rows); };
for (const [name, f] of [['arrays', arrays], ['json', json], ['arrays', arrays], ['json', json]]) {
  for (let i = 0; i < 20000; i++) f();
  const t0 = process.hrtime.bigint(); const R = 200000 / N;
  for (let i = 0; i < R; i++) f();
  console.log(name, 'N', N, (Number(process.hrtime.bigint() - t0) / R / 1000 / N).toFixed(2), 'µs per entry');
}

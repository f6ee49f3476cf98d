// Admission's cost with and without a token limit, in process: the memory limiter's admit + settle and the rate-limit headers built from its result.
// Usage: node bench/limits.mjs  (after npm run build)
import { MemoryLimiter } from '../dist/gate/limits/memory.js';
import { rateHeaders } from '../dist/gate/rate-headers.js';

const NOW = new Date().toISOString().slice(0, 7) + '-01';
const N = 200_000;

function run(label, quotas) {
  const l = new MemoryLimiter();
  const base = { accountId: 'a', keyId: 'k', rpm: 1e9, concurrency: 1e9, money: true, hold: 1000n, balance: { amount: 10n ** 15n, version: 1n },
    ceiling: null, spent: { period: 'month', start: NOW, amount: 0n, version: 1n }, ttlMs: 60_000 };
  const used = quotas ? [{ dim: 't', limit: quotas[0].limit, need: 50 }] : undefined;
  const debit = (id) => ({ id, accountId: 'a', keyId: 'k', amount: 10n, entry: '' });
  const once = (i) => {
    const out = l.admitSync({ ...base, holdId: `h${i}`, ...(quotas ? { quotas } : {}) }, Date.now());
    rateHeaders(1e9, out.remaining, out.resetMs, out.quotas);
    l.settle(`h${i}`, debit(`h${i}`), true, 10n, used);
    l.committed('a', [`h${i}`], { balance: null, spends: [] });
  };
  for (let i = 0; i < 20_000; i++) once(i);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) once(i + 20_000);
  const ns = Number(process.hrtime.bigint() - t0) / N;
  console.log(`${label}: ${(ns / 1000).toFixed(2)} us per admit + headers + settle`);
}

for (let r = 0; r < 3; r++) {
  run('rpm only        ', undefined);
  run('rpm + tpm limit ', [{ dim: 't', limit: 1e9, need: 300 }]);
}

// The headers alone: the requests trio only (as before issue 27) against the full set with a token limit.
function headersOnly(label, f) {
  for (let i = 0; i < 50_000; i++) f(i);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) f(i);
  console.log(`${label}: ${(Number(process.hrtime.bigint() - t0) / N).toFixed(0)} ns per response`);
}
const q = [{ dim: 't', limit: 20_000, remaining: 17_950, resetMs: 6_150 }];
for (let r = 0; r < 3; r++) {
  headersOnly('requests trio (before)       ', (i) => ({ 'x-ratelimit-limit-requests': String(600), 'x-ratelimit-remaining-requests': String(i % 600), 'x-ratelimit-reset-requests': `${i % 900}ms` }));
  headersOnly('rateHeaders, rpm only        ', (i) => rateHeaders(600, i % 600, i % 900));
  headersOnly('rateHeaders, rpm + tpm       ', (i) => rateHeaders(600, i % 600, i % 900, q));
}

// Two gateway instances taking turns in bursts against one account near its balance and one near its key's
// ceiling: the overshoot of each is at most one request's worst case (the fault suites and the Redis Cluster).
import assert from 'node:assert/strict';
import { bearer, chatBody, priceNano, dollarsToNano } from './gateway.mjs';

/**
 * Six rounds of 30 concurrent chats per account, alternating between `a` and `b`: every answer is a 200
 * or a 402; what was served passes $0.01 (the balance) and $0.005 (the ceiling) by at most one request.
 * Returns the two accounts and what each was served, for the caller's ledger checks.
 */
export async function burstsOnTwo(t, a, b) {
  const poor = await a.account('0.01', { rpm: 1_000_000, concurrency: 1000 });
  const capped = await a.account('10', { rpm: 1_000_000, concurrency: 1000, spendLimit: '0.005', period: 'daily' });
  const body = chatBody({ max_tokens: 64 });
  const worst = priceNano(Buffer.byteLength(body), 64);
  const served = { poor: [], capped: [] };
  for (let round = 0; round < 6; round++) {
    const gw = round % 2 ? b : a;
    await Promise.all([poor, capped].flatMap((acct) => Array.from({ length: 30 }, async () => {
      const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(acct.key), body });
      const j = await res.json();
      if (res.status === 200) served[acct === poor ? 'poor' : 'capped'].push(priceNano(j.usage.prompt_tokens, j.usage.completion_tokens));
      else assert.equal(res.status, 402, JSON.stringify(j));
    })));
  }
  const spentPoor = served.poor.reduce((x, y) => x + y, 0n);
  const spentCapped = served.capped.reduce((x, y) => x + y, 0n);
  t.diagnostic(`poor: ${served.poor.length} served, ${spentPoor} nd of 10,000,000; capped: ${served.capped.length} served, ${spentCapped} nd of a 5,000,000 ceiling; one request at most ${worst} nd`);
  assert.ok(served.poor.length > 10 && served.capped.length > 10, 'both accounts were served before their limits');
  assert.ok(spentPoor - dollarsToNano('0.01') <= worst, `balance passed by ${spentPoor - dollarsToNano('0.01')} nd, more than one request (${worst})`);
  assert.ok(spentCapped - dollarsToNano('0.005') <= worst, `ceiling passed by ${spentCapped - dollarsToNano('0.005')} nd, more than one request (${worst})`);
  return { poor, capped, spentPoor, spentCapped };
}

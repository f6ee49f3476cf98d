// Exact money: dollar parsing, formatting and pricing in integer nanodollars.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dollarsToNano, nanoToDecimal, nanoToDollars, priceUnits } from '../dist/money.js';
import { price, worstCaseTokens, FREE } from '../dist/ledger/pricing.js';
import { goDuration } from '../dist/gate/admission.js';

test('dollar amounts parse exactly to nanodollars and back', () => {
  assert.equal(dollarsToNano('12.5'), 12_500_000_000n);
  assert.equal(dollarsToNano(0.3), 300_000_000n);
  assert.equal(dollarsToNano('0.000000001'), 1n);
  assert.equal(nanoToDecimal(1n), '0.000000001');
  assert.equal(nanoToDecimal(-2_500_000_000n), '-2.5');
  assert.equal(nanoToDollars(9_999_896_000n), 9.999896);
  assert.throws(() => dollarsToNano('0.0000000001'));
  assert.throws(() => dollarsToNano('1e3'));
});

const units = (u) => ({ inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: 0, audioOutMs: 0, ...u });

test('token prices round up once and never bill below the exact price', () => {
  const m = { ...FREE, inputPerMTok: 300_000_000n, outputPerMTok: 2_500_000_000n };
  assert.equal(price(m, units({ inputTokens: 1_000_000 })), 300_000_000n);
  assert.equal(price(m, units({ inputTokens: 12, outputTokens: 40 })), 12n * 300n + 40n * 2500n);
  assert.equal(priceUnits(1n, 1n), 1n);
  assert.equal(price({ ...FREE, inputPerMTok: 1n }, units({ inputTokens: 3 })), 1n);
  assert.ok(worstCaseTokens(m, 100, 50) >= price(m, units({ inputTokens: 100, outputTokens: 50 })));
});

test('characters and audio time are priced per unit and summed before the one rounding', () => {
  // $15 per 1M characters: 1 character costs 15,000 nd exactly.
  assert.equal(price({ ...FREE, perMChar: 15_000_000_000n }, units({ characters: 1 })), 15_000n);
  // $0.006 per audio minute: 60 s = 6,000,000 nd; 1 ms = 100 nd.
  const stt = { ...FREE, audioInPerMinute: 6_000_000n };
  assert.equal(price(stt, units({ audioInMs: 60_000 })), 6_000_000n);
  assert.equal(price(stt, units({ audioInMs: 1 })), 100n);
  // 1/3 nd of audio plus 1/3 nd of audio out rounds up once to 1, not twice to 2.
  const third = { ...FREE, audioInPerMinute: 20n, audioOutPerMinute: 20n };
  assert.equal(price(third, units({ audioInMs: 1000 })), 1n); // 20 × 1000 / 60000 = 1/3 → 1
  assert.equal(price(third, units({ audioInMs: 1000, audioOutMs: 1000 })), 1n); // 2/3 → 1
  assert.equal(price(third, units({ audioInMs: 2000, audioOutMs: 2000 })), 2n); // 4/3 → 2
  // every unit at once: the exact sum, rounded up once
  const all = { inputPerMTok: 1n, outputPerMTok: 1n, perMChar: 1n, audioInPerMinute: 1n, audioOutPerMinute: 1n };
  assert.equal(price(all, units({ inputTokens: 1, outputTokens: 1, characters: 1, audioInMs: 1, audioOutMs: 1 })), 1n);
  assert.equal(price(all, units({})), 0n);
});

test('reset durations read like OpenAI headers', () => {
  assert.equal(goDuration(850), '850ms');
  assert.equal(goDuration(1000), '1s');
  assert.equal(goDuration(360_000), '6m0s');
});

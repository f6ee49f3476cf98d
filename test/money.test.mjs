// Exact money: dollar parsing, formatting and pricing in integer nanodollars.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dollarsToNano, nanoToDecimal, nanoToDollars, priceUnits } from '../dist/ledger/money.js';
import { priceTokens, worstCase } from '../dist/ledger/pricing.js';
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

test('token prices round up once and never bill below the exact price', () => {
  const m = { inputPerMTok: 300_000_000n, outputPerMTok: 2_500_000_000n };
  assert.equal(priceTokens(m, { input: 1_000_000, output: 0 }), 300_000_000n);
  assert.equal(priceTokens(m, { input: 12, output: 40 }), 12n * 300n + 40n * 2500n);
  assert.equal(priceUnits(1n, 1n), 1n);
  assert.equal(priceTokens({ inputPerMTok: 1n, outputPerMTok: 0n }, { input: 3, output: 0 }), 1n);
  assert.ok(worstCase(m, 100, 50) >= priceTokens(m, { input: 100, output: 50 }));
});

test('reset durations read like OpenAI headers', () => {
  assert.equal(goDuration(850), '850ms');
  assert.equal(goDuration(1000), '1s');
  assert.equal(goDuration(360_000), '6m0s');
});

// The hot path's shortcuts say exactly what the long way says: the units header is the ledger record's units, a serialized entry reads back as the entry.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { usage, usageRecord, unitsText } from '../dist/exchange/usage.js';
import { serializeEntry, parseEntry } from '../dist/ledger/settle.js';

const UNITS = ['inputTokens', 'outputTokens', 'reasoningTokens', 'characters', 'audioInMs', 'audioOutMs', 'audioInputTokens', 'audioOutputTokens', 'cachedInputTokens'];

test('x-tollgate-units names the units of the ledger record, in its order, for every mix of units', () => {
  for (let mask = 0; mask < 1 << UNITS.length; mask++) {
    const init = { basis: 'exact' };
    UNITS.forEach((k, i) => { if (mask & (1 << i)) init[k] = k.endsWith('Ms') ? 1500 + i : 7 + i; });
    const u = usage(init);
    const long = Object.entries(usageRecord(u)).filter(([k]) => k !== 'basis').map(([k, v]) => `${k}=${String(v)}`).join(',');
    assert.equal(unitsText(u), long);
  }
});

test('usageRecord keeps the units first and lets what is added after them follow, without touching what it was given', () => {
  const extra = { prices: { input_per_mtok: '0.3' }, client_dropped: true };
  const r = usageRecord(usage({ inputTokens: 3, outputTokens: 4, basis: 'partial' }), extra);
  assert.deepEqual(Object.keys(r), ['input_tokens', 'output_tokens', 'basis', 'prices', 'client_dropped']);
  assert.deepEqual(Object.keys(extra), ['prices', 'client_dropped']);
});

test('a serialized ledger entry reads back as the same entry, with or without a model and usage', () => {
  const at = new Date('2026-11-26T05:00:00.123Z');
  const full = { idemKey: 'req_a', nonce: 'n1', accountId: 'acct_1', keyId: 'key_1', kind: 'debit', amount: 5200n, reason: 'chat.completions', model: 'sim-chat', usage: { input_tokens: 3, basis: 'exact' }, at };
  assert.deepEqual(parseEntry(serializeEntry(full)), full);
  const bare = { idemKey: 'pay_1', nonce: 'n2', accountId: 'acct_1', keyId: null, kind: 'credit', amount: 10n ** 12n, reason: 'top-up', at };
  assert.deepEqual(parseEntry(serializeEntry(bare)), bare);
  assert.deepEqual(Object.keys(JSON.parse(serializeEntry(bare))), ['idemKey', 'nonce', 'accountId', 'keyId', 'kind', 'amount', 'reason', 'at']);
});

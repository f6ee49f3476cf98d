// Random identifiers (src/store/ids.ts): base62 of the length asked, uniform over its 62 characters.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { base62, newApiKey } from '../dist/store/ids.js';

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

test('base62 gives the length asked, from the 62 characters only, each about as often, and no two ids alike', () => {
  for (const len of [1, 8, 12, 16, 24, 40, 64, 65, 200]) {
    const id = base62(len);
    assert.equal(id.length, len, `length ${len}`);
    assert.match(id, /^[0-9A-Za-z]+$/);
  }
  const counts = new Map([...ALPHABET].map((c) => [c, 0]));
  const seen = new Set();
  const n = 20000;
  for (let i = 0; i < n; i++) {
    const id = base62(16);
    seen.add(id);
    for (const c of id) counts.set(c, counts.get(c) + 1);
  }
  assert.equal(seen.size, n, 'every id distinct');
  // Chi-square over 62 cells (61 degrees of freedom): 110 is beyond p = 0.0001 for a uniform source.
  const expected = (n * 16) / 62;
  const chi = [...counts.values()].reduce((s, c) => s + (c - expected) ** 2 / expected, 0);
  assert.ok(chi < 110, `uniform: chi-square ${chi.toFixed(1)}`);
});

test('an id already returned does not change when the next is drawn', () => {
  const a = base62(24);
  const copy = `${a}`;
  base62(24);
  base62(64);
  assert.equal(a, copy);
  const k = newApiKey();
  assert.match(k.key, /^svc_live_[0-9A-Za-z]{40}$/);
});

// Random identifiers and API key material from a CSPRNG (crypto.randomFillSync), base62 without modulo bias.
import { createHash, randomFillSync } from 'node:crypto';

const B62 = Buffer.from('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz', 'latin1');

// Random bytes drawn from a pool refilled 4 KiB at a time: one syscall per few hundred ids on the hot path.
const POOL = Buffer.alloc(4096);
let poolAt = POOL.length;

function nextByte(): number {
  if (poolAt >= POOL.length) { randomFillSync(POOL); poolAt = 0; }
  return POOL[poolAt++]!;
}

// The characters are written here and read out as one string: appending them one by one made a string per character.
const OUT = Buffer.alloc(64);

export function base62(len: number): string {
  const out = len <= OUT.length ? OUT : Buffer.alloc(len);
  for (let n = 0; n < len;) {
    const b = nextByte();
    if (b < 248) out[n++] = B62[b % 62]!; // 248 = 4 * 62: rejection keeps it uniform
  }
  return out.toString('latin1', 0, len);
}

export const KEY_PREFIX = 'svc_live_';
export const KEY_RANDOM_CHARS = 40;
export const KEY_DISPLAY_PREFIX_LEN = 12;
const KEY_RE = /^svc_live_[0-9A-Za-z]{32,}$/;

export function newApiKey(): { key: string; prefix: string; hash: string } {
  const key = KEY_PREFIX + base62(KEY_RANDOM_CHARS);
  return { key, prefix: key.slice(0, KEY_DISPLAY_PREFIX_LEN), hash: hashKey(key) };
}

export function looksLikeKey(s: string): boolean {
  return s.length <= 256 && KEY_RE.test(s);
}

export function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

export function newId(kind: 'acct' | 'key' | 'req' | 'sess'): string {
  return `${kind}_${base62(kind === 'req' || kind === 'sess' ? 24 : 16)}`;
}

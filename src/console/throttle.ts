// Log-in, sign-up and password-change throttling: atomic counters per client address, account and known device,
// counted before any password is looked at.
import { isIPv6 } from 'node:net';
import type { Services } from '../services.js';
import { ConsoleError } from './http.js';
import { hitBucket, refundBucket } from '../store/console.js';

export type ThrottleKind = 'login' | 'signup' | 'password';

export const LIMITS: Record<ThrottleKind, { max: number; windowMs: number }> = {
  login: { max: 10, windowMs: 15 * 60_000 },
  signup: { max: 10, windowMs: 60 * 60_000 },
  password: { max: 10, windowMs: 15 * 60_000 },
};

const TOO_MANY: Record<ThrottleKind, string> = {
  login: 'Too many failed log-in attempts',
  signup: 'Too many sign-ups',
  password: 'Too many wrong current passwords',
};

/** What was counted for one attempt; a success gives it back, so the counters hold failures and attempts in flight. */
export interface Admitted { refund(): Promise<void> }

/**
 * Counts this attempt against each bucket in turn and refuses it (429) at the first over its limit. Counting
 * comes first and is atomic, so of N concurrent guesses at most `max` get as far as a password check.
 */
export async function admit(s: Services, kind: ThrottleKind, buckets: string[]): Promise<Admitted> {
  const { max, windowMs } = LIMITS[kind];
  const counted: string[] = [];
  for (const bucket of buckets) {
    const { hits, windowStart } = await hitBucket(s.db, bucket, windowMs);
    counted.push(bucket);
    if (hits > max) {
      const retry = Math.min(windowMs, Math.max(1000, windowStart.getTime() + windowMs - Date.now()));
      const minutes = Math.ceil(retry / 60_000);
      throw new ConsoleError(429, `${TOO_MANY[kind]}. Try again in ${minutes} minute${minutes === 1 ? '' : 's'}.`, 'Slow down',
        { 'retry-after': String(Math.ceil(retry / 1000)) });
    }
  }
  return { refund: async () => { for (const b of counted) await refundBucket(s.db, b); } };
}

/** The bucket of a client address: an IPv4 address, or an IPv6 /64 (one subscriber's usual allocation). */
export function addressBucket(kind: ThrottleKind, addr: string): string {
  return `${kind}:ip:${clientKey(addr)}`;
}

function clientKey(addr: string): string {
  const v4 = /^(?:::ffff:)?(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(addr);
  if (v4) return v4[1]!;
  if (!isIPv6(addr)) return addr;
  const [head = '', tail = ''] = addr.split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = addr.includes('::') ? [...h, ...Array<string>(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t] : h;
  const n = groups.map((g) => parseInt(g, 16));
  // An IPv4 client written out as a mapped IPv6 address (0:0:0:0:0:ffff:7f00:1) is that IPv4 address.
  if (n.length === 8 && n.slice(0, 5).every((x) => x === 0) && n[5] === 0xffff) {
    return [n[6]! >> 8, n[6]! & 255, n[7]! >> 8, n[7]! & 255].join('.');
  }
  return `${n.slice(0, 4).map((x) => x.toString(16)).join(':')}::/64`;
}

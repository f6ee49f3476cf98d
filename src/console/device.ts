// Devices that have logged in before: a signed cookie naming the user and the device, which spares the right
// password from an account's lockout (the device gets its own failure budget, and its address's limit still holds).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Services } from '../services.js';
import type { Ctx } from '../server/context.js';
import { cookies, setCookie } from './http.js';
import { sharedSecret } from '../store/console.js';

export const DEVICE_COOKIE = 'tg_device';
const DEVICE_TTL_SEC = 180 * 24 * 3600;
const FORMAT = /^(usr_[A-Za-z0-9]{1,64})\.([A-Za-z0-9_-]{22})\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/;

const keys = new WeakMap<Services['db'], Promise<string>>();

function key(s: Services): Promise<string> {
  let k = keys.get(s.db);
  if (!k) {
    k = sharedSecret(s.db, 'device_cookie');
    k.catch(() => keys.delete(s.db));
    keys.set(s.db, k);
  }
  return k;
}

function sign(secret: string, body: string): string {
  return createHmac('sha256', secret).update(body).digest('base64url');
}

/** The device id this browser carries for `userId`, when its cookie is genuine and not expired; else null. */
export async function knownDevice(s: Services, ctx: Ctx, userId: string): Promise<string | null> {
  const m = FORMAT.exec(cookies(ctx).get(DEVICE_COOKIE) ?? '');
  if (!m || m[1] !== userId) return null;
  const issued = Number(m[3]);
  if (Date.now() / 1000 - issued > DEVICE_TTL_SEC) return null;
  const want = Buffer.from(sign(await key(s), `${m[1]}.${m[2]}.${m[3]}`));
  const got = Buffer.from(m[4]!);
  return want.length === got.length && timingSafeEqual(want, got) ? m[2]! : null;
}

/** Set-Cookie marking this browser as a known device of `userId` (the same device id again when it had one). */
export async function deviceCookie(s: Services, userId: string, deviceId: string | null): Promise<string> {
  const body = `${userId}.${deviceId ?? randomBytes(16).toString('base64url')}.${Math.floor(Date.now() / 1000)}`;
  return setCookie(s, DEVICE_COOKIE, `${body}.${sign(await key(s), body)}`, DEVICE_TTL_SEC);
}

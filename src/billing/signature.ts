// Stripe-style webhook signatures: `t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`, made and checked here for the sandbox.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { GatewayError } from '../errors.js';

export const TOLERANCE_SEC = 300;

function hmac(secret: string, t: string, payload: Buffer): Buffer {
  return createHmac('sha256', secret).update(`${t}.`).update(payload).digest();
}

/** The header `stripe.webhooks.generateTestHeaderString` builds: one v1 signature at time `t`. */
export function signatureHeader(payload: string | Buffer, secret: string, t = Math.floor(Date.now() / 1000)): string {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  return `t=${t},v1=${hmac(secret, String(t), body).toString('hex')}`;
}

export function badSignature(message: string): GatewayError {
  return new GatewayError({ code: 'invalid_signature', message: `Webhook signature verification failed: ${message}` });
}

export function invalidEvent(message: string): GatewayError {
  return new GatewayError({ code: 'invalid_event', message: `The webhook event is malformed: ${message}` });
}

/**
 * Accepts the raw body when one of the header's v1 values is its HMAC under `secret` and the timestamp is
 * within `tolerance` seconds of now. Compares every candidate in constant time (no early exit on a match).
 */
export function verifySignature(raw: Buffer, header: string | undefined, secret: string, tolerance = TOLERANCE_SEC, nowSec = Math.floor(Date.now() / 1000)): void {
  if (!header) throw badSignature('no Stripe-Signature header.');
  let t: string | null = null;
  const v1: string[] = [];
  for (const part of header.split(',')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    const k = part.slice(0, i).trim();
    const v = part.slice(i + 1).trim();
    if (k === 't') t = v;
    else if (k === 'v1') v1.push(v);
  }
  if (t === null || !/^\d{1,12}$/.test(t)) throw badSignature('the header has no valid timestamp.');
  if (v1.length === 0) throw badSignature('the header has no v1 signature.');
  const expected = hmac(secret, t, raw);
  let ok = false;
  for (const v of v1) {
    if (!/^[0-9a-f]{64}$/i.test(v)) continue;
    ok = timingSafeEqual(Buffer.from(v, 'hex'), expected) || ok;
  }
  if (!ok) throw badSignature('no signature matches the payload.');
  if (Math.abs(nowSec - Number(t)) > tolerance) throw badSignature(`the timestamp is more than ${tolerance} s from now.`);
}

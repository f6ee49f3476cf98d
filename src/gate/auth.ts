// Authenticates the key from `Authorization: Bearer` or `xi-api-key`, from memory, and checks route scopes.
import { GatewayError, storeUnavailable } from '../errors.js';
import { hashKey, looksLikeKey } from '../store/ids.js';
import type { KeyRecord, Scope } from '../store/keys.js';
import type { StateCache } from './cache.js';
type Headers = Record<string, string>;

/** How an ephemeral realtime client secret begins: it opens a realtime socket, and nothing else. */
export const REALTIME_SECRET_PREFIX = 'ek_';

export function invalidKey(message: string): GatewayError {
  return new GatewayError({ code: 'invalid_api_key', message });
}

/**
 * The key a request presents, from `Authorization: Bearer` or `xi-api-key`. Two different keys
 * (both headers, or a header repeated) are refused: billing one of them silently would be a guess.
 */
export function presentedKey(headers: Headers): string | null {
  const auth = headers.authorization;
  const xi = headers['xi-api-key'];
  if (auth !== undefined && auth.includes(',')) throw invalidKey('The request carries more than one Authorization header; send exactly one key.');
  if (xi !== undefined && xi.includes(',')) throw invalidKey('The request carries more than one xi-api-key header; send exactly one key.');
  let fromAuth: string | null = null;
  if (auth !== undefined) {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    fromAuth = m ? m[1]! : '';
  }
  const fromXi = xi?.trim() ?? null;
  if (fromAuth !== null && fromXi !== null && fromAuth !== fromXi) {
    throw invalidKey('The request carries two different keys (Authorization and xi-api-key); send exactly one.');
  }
  return fromAuth ?? fromXi;
}

export async function authenticate(cache: StateCache, headers: Headers): Promise<KeyRecord> {
  const key = presentedKey(headers);
  if (key === null) throw invalidKey('No API key provided. Send it as `Authorization: Bearer svc_live_...` or in the `xi-api-key` header.');
  return authenticateKey(cache, key);
}

/** A key presented anywhere (a header, a WebSocket's query, subprotocol or first frame), checked from memory. */
export async function authenticateKey(cache: StateCache, key: string): Promise<KeyRecord> {
  if (key.startsWith(REALTIME_SECRET_PREFIX)) {
    throw invalidKey('This is a realtime client secret (`ek_...`): it only opens a realtime WebSocket (`/v1/realtime`). Call this route with a Tollgate API key (`svc_live_...`).');
  }
  if (!looksLikeKey(key)) throw invalidKey('Incorrect API key provided: it is not a Tollgate key (they start with `svc_live_`).');
  let rec: KeyRecord | null;
  try {
    rec = await cache.keyForHash(hashKey(key));
  } catch {
    throw storeUnavailable(); // not in memory, and the store could not be asked
  }
  if (!rec) throw invalidKey(`Incorrect API key provided: ${key.slice(0, 12)}... is not a known key.`);
  if (rec.revokedAt) throw invalidKey(`The API key ${rec.prefix}... has been revoked.`);
  return rec;
}

export function requireScope(key: KeyRecord, scope: Scope): void {
  if (!key.scopes.includes(scope)) {
    throw new GatewayError({
      code: 'insufficient_scope', message: `This key lacks the \`${scope}\` scope needed for this route. Create a key with the \`${scope}\` scope.`,
    });
  }
}

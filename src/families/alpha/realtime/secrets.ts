// POST /alpha/v1/realtime/client_secrets (and the older /realtime/sessions): short-lived secrets that open realtime sessions as their parent key.
import { Type } from '@sinclair/typebox';
import type { Services } from '../../../services.js';
import type { Route } from '../../../server/router.js';
import type { Ctx } from '../../../server/context.js';
import { GatewayError, type ErrorCode } from '../../../errors.js';
import { invalidKey, REALTIME_SECRET_PREFIX } from '../../../gate/auth.js';
import { base62, hashKey } from '../../../store/ids.js';
import type { KeyRecord } from '../../../store/keys.js';
import { insertSecret, secretSession } from '../../../store/realtime-secrets.js';
import { compile, parseJson } from '../../validate.js';
import { audioCaps, audioModels, chatOrRealtime } from './models.js';
import { RtError } from './protocol.js';
import { betaSessionView, defaultSession, updatedSession } from './session-config.js';

/** OpenAI's bounds: 10 s to 2 h, 10 minutes when not said. */
const MIN_S = 10;
const MAX_S = 7200;
const DEFAULT_S = 600;
export const SECRET_PREFIX = REALTIME_SECRET_PREFIX;
export const EXPIRED = 'The realtime client secret has expired; mint a new one with POST /v1/realtime/client_secrets.';

const checkBody = compile(Type.Object({
  expires_after: Type.Optional(Type.Object({
    anchor: Type.Optional(Type.Literal('created_at')),
    seconds: Type.Optional(Type.Integer({ minimum: MIN_S, maximum: MAX_S })),
  }, { additionalProperties: false })),
  session: Type.Optional(Type.Object({}, { additionalProperties: true })),
}, { additionalProperties: true }));

const BETA_DEFAULT_S = 60;
const checkBetaBody = compile(Type.Object({
  client_secret: Type.Optional(Type.Object({
    expires_after: Type.Optional(Type.Object({
      anchor: Type.Optional(Type.Literal('created_at')),
      seconds: Type.Optional(Type.Integer({ minimum: MIN_S, maximum: MAX_S })),
    }, { additionalProperties: false })),
  }, { additionalProperties: false })),
}, { additionalProperties: true }));

/** What a secret opens a session with: its parent key, the session configuration it was minted with, and when it expires (ms). */
export interface SecretGrant { key: KeyRecord; session: Record<string, unknown>; expiresAt: number }

export class RealtimeSecrets {
  constructor(private readonly s: Services) {}

  /** Mints a secret for `key`; only its hash is stored. */
  async mint(key: KeyRecord, session: Record<string, unknown>, seconds: number): Promise<{ value: string; expiresAt: number }> {
    const value = SECRET_PREFIX + base62(40);
    const expiresAt = Math.floor(Date.now() / 1000) + seconds;
    const rec = await insertSecret(this.s.db, { hash: hashKey(value), keyId: key.id, session: JSON.stringify(session), expiresAt: new Date(expiresAt * 1000) });
    // Usable on this instance at once; the others see it on their change feed.
    this.s.cache.putSecret(rec);
    return { value, expiresAt };
  }

  /**
   * The grant of a presented secret; null when it is not a secret at all (then it is read as a key).
   * Unknown, expired, or of a revoked key: 401, as a bad key is. Answered from memory (the cache
   * mirrors live secrets as it mirrors keys): only a live secret's session configuration is read.
   */
  async grant(presented: string): Promise<SecretGrant | null> {
    if (!presented.startsWith(SECRET_PREFIX)) return null;
    const hash = hashKey(presented);
    const rec = await this.s.cache.secretForHash(hash);
    if (!rec) throw invalidKey('Incorrect client secret: it is not a known realtime client secret (or it expired over an hour ago).');
    if (rec.expiresAt <= Date.now()) throw invalidKey(EXPIRED);
    // The parent key as the gateway knows it now: a revoked parent revokes its secrets.
    const key = this.s.cache.keyById(rec.keyId);
    if (!key || key.revokedAt) throw invalidKey('The key that minted this realtime client secret has been revoked.');
    const session = await secretSession(this.s.db, hash);
    if (session === null) throw invalidKey('Incorrect client secret: it is not a known realtime client secret.');
    return { key, session: JSON.parse(session) as Record<string, unknown>, expiresAt: rec.expiresAt };
  }
}

/** A session configuration checked as a session.update would be (same errors), with the model it names. */
function effective(s: Services, session: Record<string, unknown>): Record<string, unknown> {
  const name = session.model;
  if (name !== undefined && typeof name !== 'string') throw badSession('invalid_value', 'session.model', 'session.model must be a string.');
  const model = typeof name === 'string' ? chatOrRealtime(s, name) : null;
  try {
    // Checked against the models this gateway has, as the session it opens will be (audio out needs a speech model).
    const caps = audioCaps(s, audioModels(s));
    const base = defaultSession('', model?.id ?? '', caps.audioOut);
    return updatedSession(base, { ...session, model: undefined }, model ?? { id: '', maxOutputTokens: Number.MAX_SAFE_INTEGER }, caps);
  } catch (e) {
    if (e instanceof RtError) throw badSession(e.code as ErrorCode, e.param, e.message);
    throw e;
  }
}

function badSession(code: ErrorCode, param: string | null, message: string): GatewayError {
  return new GatewayError({ status: 400, code, param, message });
}

function body(ctx: Ctx, raw: Buffer | null): Record<string, unknown> {
  if (!raw || raw.length === 0) return {};
  return parseJson(checkBody, raw, ctx.headers['content-type']) as Record<string, unknown>;
}

export function realtimeSecretRoutes(s: Services, secrets: RealtimeSecrets): Route[] {
  return [
    { method: 'POST', path: '/v1/realtime/client_secrets', name: 'realtime.client_secrets', scope: 'llm',
      handler: async (ctx, { body: raw }) => {
        const b = body(ctx, raw);
        const seconds = (b.expires_after as { seconds?: number } | undefined)?.seconds ?? DEFAULT_S;
        const session = effective(s, (b.session as Record<string, unknown> | undefined) ?? {});
        const { value, expiresAt } = await secrets.mint(ctx.key!, session, seconds);
        ctx.json(200, { value, expires_at: expiresAt, session: { ...session, id: `sess_${base62(24)}`, expires_at: expiresAt } });
      } },
    // The beta's route: the beta's flat session fields in and out, the secret inside (one minute unless
    // `client_secret.expires_after` says otherwise, as the beta had it).
    { method: 'POST', path: '/v1/realtime/sessions', name: 'realtime.sessions', scope: 'llm',
      handler: async (ctx, { body: raw }) => {
        const b = raw && raw.length > 0 ? parseJson(checkBetaBody, raw, ctx.headers['content-type']) as Record<string, unknown> : {};
        const { client_secret: secret, ...fields } = b;
        const seconds = (secret as { expires_after?: { seconds?: number } } | undefined)?.expires_after?.seconds ?? BETA_DEFAULT_S;
        const session = effective(s, fields);
        const { value, expiresAt } = await secrets.mint(ctx.key!, session, seconds);
        ctx.json(200, { ...betaSessionView(session), id: `sess_${base62(24)}`, expires_at: expiresAt, client_secret: { value, expires_at: expiresAt } });
      } },
  ];
}

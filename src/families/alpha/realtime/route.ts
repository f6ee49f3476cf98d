// WS /alpha/v1/realtime?model=...: OpenAI's realtime protocol (GA events); the route and the opening of a session (its model, admission, starting configuration). The session itself is in ./realtime/.
import type { Services } from '../../../services.js';
import type { ModelConfig } from '../../../config.js';
import { GatewayError } from '../../../errors.js';
import { Charge } from '../../../exchange/charge.js';
import type { KeyRecord } from '../../../store/keys.js';
import { upgradeKey, type SocketRoute, type UpgradeRequest } from '../../../server/ws.js';
import { audioCaps, audioModels, chatOrRealtime, sessionPrices } from './models.js';
import { RtError, type Obj } from './protocol.js';
import { defaultSession, updatedSession } from './session-config.js';
import { Realtime } from './session.js';
import { openPassthrough } from './passthrough.js';

/** The browser's key-carrying subprotocols (the family's own, and ours). */
export const REALTIME_KEY_PROTOCOLS = ['openai-insecure-api-key.', 'alpha-insecure-api-key.'];

/** Authenticates a presented secret that is not a Tollgate key (an ephemeral client secret); null when it is not one. */
export type SecretAuthenticator = (presented: string) => Promise<Grant & { key: KeyRecord } | null>;
/** A client secret's session configuration and expiry (ms): a session it opens ends when it expires. */
interface Grant { session: Obj; expiresAt: number }

/** What a session opened with an expired secret is told. */
const SECRET_EXPIRED = 'The realtime client secret of this session has expired; the session is closed (mint a new secret to open another).';

export function realtimeRoute(s: Services, secrets?: SecretAuthenticator): SocketRoute {
  // A secret's grant, from its authentication at the upgrade to the session's accept (the same upgrade).
  const grants = new Map<string, Grant>();
  const route: SocketRoute = {
    path: '/v1/realtime', name: 'realtime', scope: 'llm',
    maxMessageBytes: 4 * 1024 * 1024,
    keyFrom: { protocolPrefixes: REALTIME_KEY_PROTOCOLS },
    ...(secrets ? { authenticate: async (presented: string) => {
      const g = await secrets(presented);
      if (!g) return null;
      grants.set(presented, { session: g.session, expiresAt: g.expiresAt });
      // Read by this upgrade's accept; an upgrade refused before it (scope, shutdown) leaves nothing behind.
      setTimeout(() => grants.delete(presented), 30_000).unref();
      return g.key;
    } } : {}),
    async accept(req, key, socket) {
      const presented = upgradeKey(route, req);
      const grant = presented === null ? undefined : grants.get(presented);
      if (presented !== null) grants.delete(presented);
      const minted = grant?.session;
      const model = realtimeModel(s, req, minted);
      // A realtime model whose upstream speaks the protocol itself: relayed, not run as a cascade.
      if (model.passthrough) return openPassthrough(s, req, key!, socket, model, minted, grant?.expiresAt);
      const audio = audioModels(s);
      // The session is admitted now (balance, ceiling, rpm, its concurrency slot) with nothing held.
      const charge = await Charge.open(s, { key: key!, id: socket.id, model: { id: model.id, prices: sessionPrices(model, audio) }, reason: 'realtime.response',
        worst: { inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: 0, audioOutMs: 0 } });
      let session = defaultSession(socket.id, model.id, audio.tts !== undefined);
      // A session opened with a client secret starts with the configuration the secret was minted with.
      if (minted) {
        try {
          session = updatedSession(session, { ...minted, model: undefined, id: undefined, object: undefined, expires_at: undefined }, model, audioCaps(s, audio));
        } catch (e) {
          await charge.release();
          if (e instanceof RtError) throw new GatewayError({ status: 400, code: 'invalid_value', param: e.param, message: e.message });
          throw e;
        }
      }
      return new Realtime(s, socket, model, charge, req.headers, session, audio, grant?.expiresAt, SECRET_EXPIRED);
    },
  };
  return route;
}

/** `?model=` (or the model a client secret was minted for): a realtime or chat model of the config, or an alias of one. */
function realtimeModel(s: Services, req: UpgradeRequest, minted: Obj | undefined): ModelConfig {
  const asked = req.query.get('model');
  const bound = typeof minted?.model === 'string' && minted.model !== '' ? minted.model : null;
  const name = asked ?? bound;
  if (!name) throw new GatewayError({ status: 400, code: 'invalid_value', param: 'model', message: 'The `model` query parameter is required: /v1/realtime?model=<a realtime or chat model>.' });
  const model = chatOrRealtime(s, name);
  if (bound && chatOrRealtime(s, bound).id !== model.id) {
    throw new GatewayError({ status: 400, code: 'invalid_value', param: 'model', message: `This client secret was minted for ${bound}, not ${asked}.` });
  }
  return model;
}

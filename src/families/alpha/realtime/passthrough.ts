// WS /alpha/v1/realtime on a `realtime_api` upstream: admits the session and opens the upstream's own realtime socket; the session relays (passthrough-session.ts).
import type { Services } from '../../../services.js';
import type { ModelConfig } from '../../../config.js';
import type { KeyRecord } from '../../../store/keys.js';
import { GatewayError } from '../../../errors.js';
import { Charge } from '../../../exchange/charge.js';
import type { SessionHandler, SessionSocket, UpgradeRequest } from '../../../server/ws.js';
import { openPooledSocket, type PooledSocket } from '../../../proxy/ws-upstream.js';
import { checkClientEvent, type Obj } from './passthrough-events.js';
import { Passthrough } from './passthrough-session.js';
import { alpha } from '../family.js';

/**
 * Opens a pass-through session: admitted (balance, ceiling, rpm, its concurrency slot) with nothing
 * held, then the upstream socket on the model's pool (openPooledSocket: the next upstream when one
 * cannot be reached or is busy); an upstream that refuses, or a pool every upstream of which is full
 * (503 upstream_busy), refuses the upgrade.
 * `minted` is a client secret's session configuration, sent to the upstream as a first session.update;
 * `expiresAt` its expiry (ms), when the session ends.
 */
export async function openPassthrough(s: Services, req: UpgradeRequest, key: KeyRecord, socket: SessionSocket, model: ModelConfig, minted: Obj | undefined,
  expiresAt?: number): Promise<SessionHandler> {
  let first: Obj | null = null;
  if (minted) {
    const session: Obj = { ...minted, model: undefined, id: undefined, object: undefined, expires_at: undefined };
    const refused = checkClientEvent({ type: 'session.update', session }, model, (name) => s.models.find(name)?.id === model.id);
    if (refused) throw new GatewayError({ status: 400, code: refused.code === 'unsupported_parameter' ? 'unsupported_parameter' : 'invalid_value', param: refused.param, message: refused.message });
    first = { type: 'session.update', session: JSON.parse(JSON.stringify(session)) as Obj };
  }
  const charge = await Charge.open(s, { key, id: socket.id, model: { id: model.id, prices: model.prices }, reason: 'realtime.response',
    worst: { inputTokens: 0, outputTokens: 0, characters: 0, audioInMs: 0, audioOutMs: 0 } });
  let up: PooledSocket;
  try {
    // On the model's pool: the socket holds its upstream's slot for its life (released when it closes).
    up = await openPooledSocket(s.upstreams, model.pool, {
      path: (e) => `/v1/realtime?model=${encodeURIComponent(e.upstreamModel)}`, clientHeaders: req.headers, requestId: req.requestId,
      refusal: (res, id) => alpha.upstreamError(res, id),
    });
  } catch (e) {
    await charge.release();
    throw e;
  }
  if (first) up.ws.send(JSON.stringify(first));
  return new Passthrough(s, socket, model, charge, up.ws, expiresAt, up.release, up.entry.upstreamModel);
}


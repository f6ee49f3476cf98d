// WebSocket routes (on either front end, through io.ts): the upgrade authenticates and admits (a refusal is an HTTP error in the family's envelope), then a Session carries the socket.
import { CLOSE, GatewayError, statusLine, type ErrorRenderer } from '../errors.js';
import type { KeyRecord, Scope } from '../store/keys.js';
import { newId } from '../store/ids.js';
import { log } from '../observe/log.js';
import { invalidKey, presentedKey } from '../gate/auth.js';
import type { SocketIO, UpgradeOut } from './io.js';

/** What an upgrade request carries, read synchronously before anything is awaited. */
export interface UpgradeRequest {
  path: string;
  query: URLSearchParams;
  headers: Record<string, string>;
  params: Record<string, string>;
  requestId: string;
  /** The subprotocols the client offered, in its order. */
  protocols: string[];
}

/** A session's socket, as its handler sees it: sends with backpressure, closes with a code. */
export interface SessionSocket {
  readonly id: string;
  readonly closed: boolean;
  /** Sends a text (JSON) or binary frame; resolves at once, or once the client has drained its backlog. */
  send(data: string | Uint8Array, binary?: boolean): Promise<void>;
  /** Closes with a code and a reason (at most 123 bytes, as the protocol allows). */
  close(code: number, reason?: string): void;
}

/** What a route does with an open session; `message` handlers run one at a time, in order. */
export interface SessionHandler {
  /** The socket is open: the first frames may be sent. */
  opened?(): void;
  message(data: Buffer, isBinary: boolean): Promise<void> | void;
  /** The socket is gone (client, server, timeout): settle and free what the session holds. */
  closed(code: number): Promise<void> | void;
  /** The gateway is shutting down: finish what can be finished, settle, then close with 1001. */
  shutdown(): Promise<void>;
}

export interface SocketRoute {
  path: string;                  // under the mount's prefixes; `:name` captures a segment
  name: string;                  // metrics label
  scope: Scope;
  /** Largest frame a client may send; the front end closes the connection past it. */
  maxMessageBytes: number;
  /** Where the key may come from besides the headers: a query parameter, a subprotocol prefix. */
  keyFrom?: { query?: string[]; protocolPrefixes?: string[] };
  /** The key may arrive in the first frame instead (ElevenLabs' stream-input): the upgrade then needs none. */
  keyInFirstFrame?: boolean;
  /**
   * Reads a presented secret that is not a Tollgate key (a realtime ephemeral client secret) as the
   * key it stands for; null when it is not one of the route's own (then it is checked as a key).
   */
  authenticate?(presented: string): Promise<KeyRecord | null>;
  /**
   * Runs after authentication (if there was a key) and before the upgrade: admits the session (its
   * concurrency slot, a balance check) and returns the handler. A GatewayError refuses the upgrade.
   */
  accept(req: UpgradeRequest, key: KeyRecord | null, socket: SessionSocket): Promise<SessionHandler>;
}

/** A per-socket backlog past which `send` waits for the drain. */
const BACKPRESSURE_BYTES = 256 * 1024;

export class Session implements SessionSocket {
  readonly id = newId('sess');
  closed = false;
  handler: SessionHandler | null = null;
  private socket: SocketIO | null = null;
  /** A close asked for before the socket opened (a session stopped during its upgrade): done once it opens. */
  private closeOnOpen: [number, string] | null = null;
  private drainWaiters: (() => void)[] = [];
  private queue: Promise<void> = Promise.resolve();

  constructor(readonly route: SocketRoute) {}

  async send(data: string | Uint8Array, binary = false): Promise<void> {
    const ws = this.ws;
    if (this.closed || !ws) return;
    ws.send(data, binary);
    if (ws.getBufferedAmount() > BACKPRESSURE_BYTES) {
      await new Promise<void>((resolve) => this.drainWaiters.push(resolve));
    }
  }

  get ws(): SocketIO | null { return this.socket; }
  set ws(w: SocketIO | null) {
    this.socket = w;
    const pending = this.closeOnOpen;
    this.closeOnOpen = null;
    if (w && pending) queueMicrotask(() => this.close(...pending));
  }

  close(code: number, reason = ''): void {
    if (!this.closed && !this.ws) { this.closeOnOpen = [code, reason]; return; }
    if (this.closed || !this.ws) return;
    // The protocol allows 123 bytes of reason.
    let r = Buffer.from(reason);
    if (r.length > 123) r = r.subarray(0, 120);
    this.ws.end(code, r);
  }

  /** Messages are handled one after another, in the order they came. */
  enqueue(data: Buffer, isBinary: boolean): void {
    this.queue = this.queue.then(async () => {
      if (this.closed || !this.handler) return;
      try {
        await this.handler.message(data, isBinary);
      } catch (e) {
        log('error', 'session message handler failed', { session: this.id, route: this.route.name, error: String((e as Error)?.stack ?? e) });
        this.close(CLOSE.INTERNAL, 'internal error');
      }
    });
  }

  drained(): void {
    if (!this.ws || this.ws.getBufferedAmount() > BACKPRESSURE_BYTES / 2) return;
    for (const w of this.drainWaiters.splice(0)) w();
  }

  onClosed(): void {
    this.closed = true;
    this.ws = null;
    for (const w of this.drainWaiters.splice(0)) w();
  }
}

/** Writes an HTTP refusal of an upgrade in the family's envelope. */
export function refuseUpgrade(res: UpgradeOut, err: GatewayError, family: ErrorRenderer, requestId: string): void {
  res.cork(() => {
    res.writeStatus(statusLine(err.status));
    res.writeHeader('content-type', 'application/json');
    res.writeHeader('x-request-id', requestId);
    for (const [k, v] of Object.entries(err.headers)) res.writeHeader(k, v);
    res.end(family.render(err, requestId));
  });
}

// ---- Credentials and frame sizes of an upgrade (issue 23) ----

/** Reads a key from the places a socket route allows besides the headers (query, subprotocol); two different ones are refused (401). */
export function socketKey(route: SocketRoute, req: UpgradeRequest): string | null {
  const found: string[] = [];
  for (const q of route.keyFrom?.query ?? []) {
    for (const v of req.query.getAll(q)) if (v) found.push(v.replace(/^Bearer\s+/i, '').trim());
  }
  for (const prefix of route.keyFrom?.protocolPrefixes ?? []) {
    for (const p of req.protocols) if (p.startsWith(prefix)) found.push(p.slice(prefix.length));
  }
  if (new Set(found).size > 1) throw invalidKey('The upgrade carries more than one key (in its query or subprotocols); send exactly one.');
  return found[0] ?? null;
}

/**
 * The one credential an upgrade presents: from the headers (Authorization, xi-api-key) or from where
 * the route also allows one. Two different credentials (a bearer key and a client secret in the
 * subprotocol, say) are refused with 401, as an HTTP request with two keys is: billing either one
 * would be a guess. The same key twice is one credential.
 */
export function upgradeKey(route: SocketRoute, req: UpgradeRequest): string | null {
  const header = presentedKey(req.headers);
  const other = socketKey(route, req);
  if (header !== null && other !== null && header !== other) {
    throw invalidKey('The upgrade carries two different credentials (a header and its query or subprotocol); send exactly one.');
  }
  return header ?? other;
}

/**
 * The frame size uWS itself enforces, above every route's own limit: past its limit uWS drops the
 * connection without a close frame (the client sees 1006), so it is set to twice the largest route's
 * limit and a frame between a route's limit and that is closed by the gateway with 1009 (message too
 * big, RFC 6455 7.4.1). A frame past twice the limit is still dropped by uWS (1006): buffering it to
 * say 1009 would let one client make the gateway hold any amount of memory.
 */
export function transportFrameLimit(largestRouteLimit: number): number {
  return 2 * largestRouteLimit;
}

// The front-end interface: what Ctx, the body readers and a Session use of a connection. uWS's own
// HttpRequest / HttpResponse / WebSocket have these shapes (its front end passes them through as they
// are); the node:http front end (node-frontend.ts) adapts node's request, response and `ws` socket to them.
import type { Session } from './ws.js';

/** A request's head, read synchronously when it arrives. */
export interface HttpIn {
  getCaseSensitiveMethod(): string;
  /** The path, without the query. */
  getUrl(): string;
  /** The query without its `?` (empty or undefined when there is none). */
  getQuery(): string | undefined;
  /** Every header line as received, names in lower case, repeated names once per line. */
  forEach(cb: (key: string, value: string) => void): void;
  /** The first value of a header (lower-case name), or ''. */
  getHeader(lowerCaseKey: string): string;
}

/** A body chunk: an ArrayBuffer is the front end's memory, valid only during the callback (uWS); a Buffer is the reader's. */
export type Chunk = ArrayBuffer | Buffer;
export type OutBody = string | Uint8Array;

/** A response: written once (status, headers, end) or streamed (write with backpressure, end). */
export interface HttpOut {
  /** Runs once if the connection goes before the response ends (the client left, or close() was called). */
  onAborted(handler: () => void): unknown;
  /** Body chunks as they come; `isLast` on the final one (which may be empty). Set synchronously or lose them. */
  onData(handler: (chunk: Chunk, isLast: boolean) => void): unknown;
  pause(): void;
  resume(): void;
  /** Batches the writes made inside `cb` into one send. */
  cork(cb: () => void): unknown;
  writeStatus(status: string): unknown;
  /** One header line; called again with the same name, another line. */
  writeHeader(key: string, value: string): unknown;
  /** False when the client's backlog is full: wait for onWritable before writing more. */
  write(chunk: OutBody): boolean;
  onWritable(handler: (offset: number) => boolean): unknown;
  end(body?: OutBody): unknown;
  /** Drops the connection now (onAborted runs). */
  close(): unknown;
  getRemoteAddressAsText(): ArrayBuffer;
}

/** What an upgrade refusal writes: an HTTP response in the family's envelope, then the connection ends. */
export type UpgradeOut = Pick<HttpOut, 'onAborted' | 'cork' | 'writeStatus' | 'writeHeader' | 'end'>;

/** An open WebSocket. */
export interface SocketIO {
  send(data: OutBody, isBinary: boolean): unknown;
  /** Bytes sent and not yet taken by the client. */
  getBufferedAmount(): number;
  /** Closes with a code and a reason (at most 123 bytes). */
  end(code: number, reason: Uint8Array): void;
}

/** A front end's name, as the banner and `/metrics` show it. */
export type FrontEndName = 'uws' | 'node';

/** A chunk the caller may keep: uWS reuses its memory once the callback returns, so that one is copied. */
export function keepChunk(chunk: Chunk): Buffer {
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.slice(0));
}

/** What a front end calls on the gateway: one call per request, upgrade and socket event. */
export interface FrontEndHost {
  /** A request: must read `req` and set `res.onData` synchronously. */
  request(res: HttpOut, req: HttpIn): void;
  /** An upgrade request: `accept` is called (once admitted) to complete the upgrade with this session and subprotocol. */
  upgrade(res: UpgradeOut, req: HttpIn, accept: (session: Session, protocol: string) => void): void;
  opened(session: Session, socket: SocketIO): void;
  /** A whole message, the caller's to keep. */
  message(session: Session, data: Buffer, isBinary: boolean): void;
  drained(session: Session): void;
  /** The socket is gone (or the upgrade never completed): `code` as received, 1006 if none. */
  closed(session: Session, code: number): void;
  /** The largest message any socket route takes. */
  readonly maxSocketMessage: number;
}

/** A bound listener. */
export interface Listener {
  readonly port: number;
  /** Stops accepting connections (those open finish what they are doing). */
  close(): void;
}

/** A front end: serves a host on an address. */
export interface FrontEnd {
  readonly name: FrontEndName;
  /** What the banner says of it. */
  readonly description: string;
  listen(host: FrontEndHost, hostname: string, port: number): Promise<Listener>;
}

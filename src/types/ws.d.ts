// The part of the `ws` package's API Tollgate uses (the package ships no types; @types/ws is not installed).
declare module 'ws' {
  import type { EventEmitter } from 'node:events';
  import type { IncomingMessage, ClientRequest, OutgoingHttpHeaders } from 'node:http';
  import type { Duplex } from 'node:stream';

  export type RawData = Buffer | ArrayBuffer | Buffer[];

  export interface ClientOptions {
    headers?: OutgoingHttpHeaders;
    handshakeTimeout?: number;
    maxPayload?: number;
    perMessageDeflate?: boolean;
  }

  class WebSocket extends EventEmitter {
    static readonly CONNECTING: 0;
    static readonly OPEN: 1;
    static readonly CLOSING: 2;
    static readonly CLOSED: 3;
    constructor(address: string, protocols?: string | string[], options?: ClientOptions);
    readonly readyState: 0 | 1 | 2 | 3;
    /** Bytes queued by `send` and not yet handed to the socket (plus the socket's own write buffer). */
    readonly bufferedAmount: number;
    readonly protocol: string;
    send(data: string | Buffer | Uint8Array, cb?: (err?: Error) => void): void;
    send(data: string | Buffer | Uint8Array, options: { binary?: boolean }, cb?: (err?: Error) => void): void;
    close(code?: number, reason?: string | Buffer): void;
    terminate(): void;
    ping(data?: string | Buffer): void;
    /** Stops reading from the socket: no more `message` events until `resume`. */
    pause(): void;
    resume(): void;
    on(event: 'open', listener: () => void): this;
    on(event: 'message', listener: (data: RawData, isBinary: boolean) => void): this;
    on(event: 'close', listener: (code: number, reason: Buffer) => void): this;
    on(event: 'error', listener: (err: Error) => void): this;
    on(event: 'pong', listener: (data: Buffer) => void): this;
    on(event: 'unexpected-response', listener: (req: ClientRequest, res: IncomingMessage) => void): this;
    once(event: 'open', listener: () => void): this;
    once(event: 'close', listener: (code: number, reason: Buffer) => void): this;
    once(event: 'error', listener: (err: Error) => void): this;
    once(event: 'unexpected-response', listener: (req: ClientRequest, res: IncomingMessage) => void): this;
  }

  export interface ServerOptions {
    noServer?: boolean; maxPayload?: number; perMessageDeflate?: boolean; clientTracking?: boolean;
    /** The subprotocol to answer (false: none) from those the client offered. */
    handleProtocols?: (protocols: Set<string>, req: IncomingMessage) => string | false;
  }

  export class WebSocketServer extends EventEmitter {
    constructor(options: ServerOptions);
    handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, cb: (ws: WebSocket, req: IncomingMessage) => void): void;
    close(cb?: (err?: Error) => void): void;
  }

  export { WebSocket };
  export default WebSocket;
}

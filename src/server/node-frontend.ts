// The node:http front end: node's HTTP server and the `ws` package serve the same host as uWS does
// (io.ts), on any Node this project runs on: the choice where no uWS binary loads (frontend.ts).
import http from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import type { FrontEnd, FrontEndHost, Listener } from './io.js';
import { NodeIn, NodeOut, NodeSocket, NodeUpgradeOut } from './node-io.js';
import type { Session } from './ws.js';

/**
 * Header bytes node itself takes before answering a bare 431: above the gateway's own limit
 * (MAX_HEADER_BYTES, answered in the family's envelope), so that limit is the one clients meet.
 */
const NODE_MAX_HEADER_BYTES = 256 * 1024;
/** Seconds a socket may stay silent (pings answered count) before it is dropped, as uWS's idleTimeout. */
const SOCKET_IDLE_S = 120;
/**
 * The listen backlog: connections the kernel completes and queues while the process is busy elsewhere.
 * Node's default is 511; a burst past it has its handshakes dropped and retried by the client a second or
 * more later (9,900 streams opened at once: 17-31% failed at the bench's 60 s timeout, against 0.6-0.9%
 * with this). The kernel caps it at net.core.somaxconn (4096 by default since Linux 5.4).
 */
const LISTEN_BACKLOG = 65_535;

export const nodeFrontEnd: FrontEnd = {
  name: 'node',
  description: `node:http (Node ${process.version}, with the ws package for WebSockets)`,
  listen,
};

function listen(host: FrontEndHost, hostname: string, port: number): Promise<Listener> {
  const server = http.createServer({
    maxHeaderSize: NODE_MAX_HEADER_BYTES,
    // uWS neither limits a whole request's time nor needs a Host header: a streamed upload may run long.
    requestTimeout: 0,
    requireHostHeader: false,
    // As uWS: a client that has not sent its whole head within 10 s is cut off (slow headers), checked every second.
    headersTimeout: 10_000,
    connectionsCheckingInterval: 1_000,
    keepAliveTimeout: 10_000,
  }, (req, res) => host.request(new NodeOut(req, res), new NodeIn(req)));
  // Every header line reaches the gateway (node drops those past 2,000 silently by default): the byte limit bounds them.
  server.maxHeadersCount = 0;
  server.on('clientError', onClientError);
  const sockets = new SocketServer(host);
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => sockets.upgrade(req, socket, head));
  return new Promise<Listener>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host: hostname, backlog: LISTEN_BACKLOG }, () => {
      server.off('error', reject);
      const addr = server.address();
      let open = true;
      resolve({
        port: typeof addr === 'object' && addr ? addr.port : port,
        close: () => {
          if (!open) return;
          open = false;
          server.close();
          sockets.close();
        },
      });
    });
  });
}

/**
 * A request node cannot parse: headers past NODE_MAX_HEADER_BYTES get a bare 431, other garbage a 400;
 * one too slow to send its head is dropped without an answer, as uWS drops it (it asked nothing yet).
 */
function onClientError(err: Error & { code?: string }, socket: Duplex): void {
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ECONNRESET' || !socket.writable) { socket.destroy(); return; }
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
  socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
}

/** WebSocket upgrades: the host admits or refuses; an admitted one becomes a `ws` socket carrying its session. */
class SocketServer {
  private readonly wss: WebSocketServer;
  private readonly protocols = new WeakMap<http.IncomingMessage, string>();
  private readonly live = new Map<WebSocket, { alive: boolean }>();
  private readonly ticker: NodeJS.Timeout;

  constructor(private readonly host: FrontEndHost) {
    this.wss = new WebSocketServer({
      noServer: true, clientTracking: false, perMessageDeflate: false, maxPayload: host.maxSocketMessage,
      // The subprotocol the host chose (none: no header, as uWS answers an empty one).
      handleProtocols: (_offered, req) => this.protocols.get(req) || false,
    });
    // Pings every half idle period; a socket that answered nothing since the last one is dropped.
    this.ticker = setInterval(() => {
      for (const [ws, state] of this.live) {
        if (!state.alive) { ws.terminate(); continue; }
        state.alive = false;
        ws.ping();
      }
    }, (SOCKET_IDLE_S / 2) * 1000);
    this.ticker.unref();
  }

  upgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): void {
    const out = new NodeUpgradeOut(socket);
    this.host.upgrade(out, new NodeIn(req), (session, protocol) => {
      out.upgraded();
      this.protocols.set(req, protocol);
      let opened = false;
      // A handshake `ws` refuses (a bad key or version) ends the socket without a WebSocket: the session never opens.
      socket.once('close', () => { if (!opened) this.host.closed(session, 1006); });
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        opened = true;
        this.open(session, ws);
      });
    });
  }

  private open(session: Session, ws: WebSocket): void {
    const state = { alive: true };
    this.live.set(ws, state);
    const seen = () => { state.alive = true; };
    ws.on('pong', seen);
    ws.on('error', () => undefined); // a protocol error closes the socket: 'close' reports it
    ws.on('message', (data: RawData, isBinary: boolean) => {
      seen();
      // A Buffer with the default binaryType; the others only in case.
      this.host.message(session, Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data), isBinary);
    });
    ws.once('close', (code: number) => {
      this.live.delete(ws);
      this.host.closed(session, code);
    });
    this.host.opened(session, new NodeSocket(ws, () => this.host.drained(session)));
  }

  close(): void {
    clearInterval(this.ticker);
  }
}

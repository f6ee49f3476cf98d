// node:http's request, response and upgrade socket, and a `ws` WebSocket, adapted to the io.ts interface
// (the shapes uWS has), so Ctx, the body readers and Session run on node:http unchanged.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import type { Chunk, HttpIn, HttpOut, OutBody, SocketIO, UpgradeOut } from './io.js';

const EMPTY = Buffer.alloc(0);

export class NodeIn implements HttpIn {
  private readonly path: string;
  private readonly query: string;

  constructor(private readonly req: IncomingMessage) {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    this.path = q < 0 ? url : url.slice(0, q);
    this.query = q < 0 ? '' : url.slice(q + 1);
  }

  getCaseSensitiveMethod(): string { return this.req.method ?? 'GET'; }
  getUrl(): string { return this.path; }
  getQuery(): string { return this.query; }

  /** From the raw lines: node's `headers` object drops repeats of some names (authorization, content-type…). */
  forEach(cb: (key: string, value: string) => void): void {
    const raw = this.req.rawHeaders;
    for (let i = 0; i + 1 < raw.length; i += 2) cb(raw[i]!.toLowerCase(), raw[i + 1]!);
  }

  getHeader(lowerCaseKey: string): string {
    const raw = this.req.rawHeaders;
    for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]!.toLowerCase() === lowerCaseKey) return raw[i + 1]!;
    return '';
  }
}

/** Status and header lines gathered until the first write, as uWS does. */
class Head {
  status = 200;
  message = 'OK';
  readonly lines: string[] = [];

  writeStatus(line: string): void {
    const sp = line.indexOf(' ');
    this.status = Number(sp < 0 ? line : line.slice(0, sp));
    this.message = sp < 0 ? '' : line.slice(sp + 1);
  }

  has(lowerCaseKey: string): boolean {
    for (let i = 0; i < this.lines.length; i += 2) if (this.lines[i]!.toLowerCase() === lowerCaseKey) return true;
    return false;
  }
}

export class NodeOut implements HttpOut {
  private readonly head = new Head();
  private ended = false;
  private abortHandler: (() => void) | null = null;
  private writableHandler: ((offset: number) => boolean) | null = null;

  constructor(private readonly req: IncomingMessage, private readonly res: ServerResponse) {
    // The connection went before the response ended (the client left, or close() below).
    res.once('close', () => {
      if (this.ended) return;
      this.ended = true;
      const h = this.abortHandler;
      this.abortHandler = null;
      h?.();
    });
    res.on('drain', () => {
      const h = this.writableHandler;
      if (h && h(0)) this.writableHandler = null;
    });
  }

  onAborted(handler: () => void): this { this.abortHandler = handler; return this; }

  onData(handler: (chunk: Chunk, isLast: boolean) => void): this {
    this.req.on('data', (c: Buffer) => handler(c, false));
    this.req.once('end', () => handler(EMPTY, true));
    return this;
  }

  pause(): void { this.req.pause(); }
  resume(): void { this.req.resume(); }
  cork(cb: () => void): this { cb(); return this; }
  writeStatus(status: string): this { this.head.writeStatus(status); return this; }
  writeHeader(key: string, value: string): this { this.head.lines.push(key, value); return this; }

  private sendHead(): void {
    if (!this.res.headersSent) this.res.writeHead(this.head.status, this.head.message, this.head.lines);
  }

  write(chunk: OutBody): boolean {
    if (this.ended) return true;
    this.sendHead();
    return this.res.write(chunk);
  }

  onWritable(handler: (offset: number) => boolean): this { this.writableHandler = handler; return this; }

  end(body?: OutBody): this {
    if (this.ended) return this;
    this.ended = true;
    // A response in one piece says its length (node would otherwise send it chunked, as it does streams).
    if (!this.res.headersSent && !this.head.has('content-length')) {
      this.head.lines.push('content-length', String(body === undefined ? 0 : typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength));
    }
    this.sendHead();
    this.res.end(body);
    return this;
  }

  close(): this {
    this.res.destroy();
    return this;
  }

  getRemoteAddressAsText(): ArrayBuffer {
    const b = Buffer.from(this.req.socket.remoteAddress ?? '');
    return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
  }
}

/** An upgrade's refusal, written on the raw socket node hands over (an HTTP response, then the end). */
export class NodeUpgradeOut implements UpgradeOut {
  private readonly head = new Head();
  private done = false;
  private abortHandler: (() => void) | null = null;

  constructor(private readonly socket: Duplex) {
    socket.once('close', () => { if (!this.done) { this.done = true; this.abortHandler?.(); } });
    socket.on('error', () => undefined); // a client gone mid-answer: the close above reports it
  }

  onAborted(handler: () => void): this { this.abortHandler = handler; return this; }
  cork(cb: () => void): this { cb(); return this; }
  writeStatus(status: string): this { this.head.writeStatus(status); return this; }
  writeHeader(key: string, value: string): this { this.head.lines.push(key, value); return this; }

  /** The socket is now the WebSocket's: a later close is the session's to report. */
  upgraded(): void { this.done = true; }

  end(body: OutBody = ''): this {
    if (this.done) return this;
    this.done = true;
    const b = typeof body === 'string' ? Buffer.from(body) : body;
    let text = `HTTP/1.1 ${this.head.status} ${this.head.message}\r\n`;
    for (let i = 0; i < this.head.lines.length; i += 2) text += `${this.head.lines[i]}: ${this.head.lines[i + 1]}\r\n`;
    text += `content-length: ${b.byteLength}\r\nconnection: close\r\n\r\n`;
    this.socket.write(text);
    this.socket.end(b);
    return this;
  }
}

/** A socket whose backlog passes this is dropped (uWS's maxBackpressure): sessions wait long before it. */
const MAX_BACKPRESSURE = 64 * 1024 * 1024;

export class NodeSocket implements SocketIO {
  constructor(private readonly ws: WebSocket, private readonly onDrain: () => void) {}

  send(data: OutBody, isBinary: boolean): void {
    // The callback runs once the frame is handed to the kernel: the backlog may have drained.
    this.ws.send(data, { binary: isBinary }, () => this.onDrain());
    if (this.ws.bufferedAmount > MAX_BACKPRESSURE) this.ws.terminate();
  }

  getBufferedAmount(): number { return this.ws.bufferedAmount; }

  end(code: number, reason: Uint8Array): void {
    try {
      this.ws.close(code, Buffer.from(reason.buffer, reason.byteOffset, reason.byteLength));
    } catch {
      this.ws.terminate(); // a code the protocol does not let a server send
    }
  }
}

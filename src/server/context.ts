// One request's state on the front end (uWS or node:http, through io.ts): headers read up front, abort tracking, and backpressured writes (the exchange's Downstream).
import type { HttpIn, HttpOut } from './io.js';
import { GatewayError, statusLine, type ErrorRenderer } from '../errors.js';
import { newId } from '../store/ids.js';
import type { KeyRecord } from '../store/keys.js';
import type { RequestTrace } from '../observe/trace.js';

/** A request carrying this header (any value) is answered with `x-tollgate-overhead-ms`. */
export const OVERHEAD_ASKED = 'x-tollgate-timing';
export const OVERHEAD_HEADER = 'x-tollgate-overhead-ms';
const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{8,128}$/;
const JSON_TYPE = 'application/json';

export type Headers = Record<string, string>;
/** Response headers: a list is written once per value (several Set-Cookie). */
export type OutHeaders = Record<string, string | readonly string[]>;

interface PendingHead { headers: Headers; overhead: string | null }

/** Until a route's family is known: the plain `{error: {...}}` shape. */
const PLAIN: ErrorRenderer = {
  render: (err) => JSON.stringify({ error: { message: err.message, type: err.type, param: err.param, code: err.code } }),
};

export class Ctx {
  readonly method: string;
  readonly url: string;
  path: string;
  readonly query: string;
  readonly headers: Headers = {};
  readonly requestId: string;
  private remote: string | null = null;
  readonly started = process.hrtime.bigint();
  /** The envelope errors are rendered in: the matched route's family (set by the router). */
  family: ErrorRenderer = PLAIN;
  routeName = 'unmatched';
  key: KeyRecord | null = null;
  status = 0;
  aborted = false;
  headersSent = false;
  finished = false;
  upstreamNs = 0n;
  /** The admission's rate-limit headers: written on every response once the request is admitted (a header given explicitly wins). */
  rateHeaders: Headers | null = null;
  /** Bytes of the request's header lines as received (names, values, separators). */
  headerBytes = 0;
  /** The error code answered, if the request failed (for the status page's areas). */
  errorCode: string | null = null;
  /** This request's trace when tracing is configured; null costs nothing. */
  trace: RequestTrace | null = null;
  private readonly abortHandlers: (() => void)[] = [];
  private writableWaiter: (() => void) | null = null;
  /** A streamed response's status and headers, begun and not yet written (they go with its first bytes). */
  private head: PendingHead | null = null;

  constructor(readonly res: HttpOut, req: HttpIn) {
    this.method = req.getCaseSensitiveMethod().toUpperCase();
    this.path = req.getUrl();
    this.query = req.getQuery() ?? '';
    this.url = this.query ? `${this.path}?${this.query}` : this.path;
    // A repeated header keeps every value (comma-joined, as HTTP lists are): two credentials stay visible as two.
    req.forEach((k, v) => {
      this.headerBytes += k.length + v.length + 4;
      const prior = this.headers[k];
      this.headers[k] = prior === undefined ? v : `${prior}, ${v}`;
    });
    const given = this.headers['x-request-id'];
    this.requestId = given && SANE_REQUEST_ID.test(given) ? given : newId('req');
    res.onAborted(() => {
      this.aborted = true;
      this.writableWaiter?.();
      for (const h of this.abortHandlers.splice(0)) h();
    });
  }

  /**
   * The client's address, read from the socket the first time it is asked for (a system call the
   * metered routes never need; only the console's sign-in throttles use it). Once the response is
   * done the socket may be gone: then it is empty.
   */
  get remoteAddress(): string {
    if (this.remote === null) this.remote = this.live ? Buffer.from(this.res.getRemoteAddressAsText()).toString() : '';
    return this.remote;
  }

  /** Runs `fn` when the client goes away before the response ends (at once if it already has). */
  onAbort(fn: () => void): void {
    if (this.aborted) fn(); else this.abortHandlers.push(fn);
  }

  get live(): boolean {
    return !this.aborted && !this.finished;
  }

  send(status: number, body: string | Buffer | Uint8Array, headers: OutHeaders = {}, contentType = JSON_TYPE): void {
    if (!this.live) return;
    this.status = status;
    this.finished = true;
    this.headersSent = true;
    this.res.cork(() => {
      this.writeHeadLines(status, headers, this.overheadAsked(), contentType);
      this.res.end(body);
    });
  }

  json(status: number, value: unknown, headers?: Headers): void {
    this.send(status, JSON.stringify(value), headers);
  }

  fail(err: GatewayError): void {
    this.errorCode = err.code;
    if (this.headersSent) { this.close(); return; }
    this.send(err.status, this.family.render(err, this.requestId), err.headers);
  }

  /**
   * Starts a streamed response; the body follows through write() and end(). The status and headers go
   * out with the first write (or the end), in the same send: uWS ends a streamed response's header block
   * (its `Transfer-Encoding: chunked` and blank line) only at its first body bytes, so written here they
   * were a send of their own that no client could use yet, one system call per stream more on each side.
   */
  begin(status: number, headers: Headers): void {
    if (!this.live || this.headersSent) return;
    this.status = status;
    this.headersSent = true;
    // The overhead so far is read now, when the upstream's headers are in, as it was when they went out here.
    this.head = { headers, overhead: this.overheadAsked() };
  }

  /** The streamed response's status and headers (begin), inside the cork of its first write or its end. */
  private writeHead(head: PendingHead): void {
    this.head = null;
    this.writeHeadLines(this.status, head.headers, head.overhead);
  }

  /** `x-tollgate-overhead-ms`'s value now, when the request asked for it; else null. */
  private overheadAsked(): string | null {
    return this.headers[OVERHEAD_ASKED] !== undefined ? this.overheadMs() : null;
  }

  /**
   * A response's status line and headers, inside its cork: the content type when given, ours (the request id,
   * the overhead when asked, the admission's rate-limit headers unless `headers` sets them) and `headers`, a
   * list written once per value.
   */
  private writeHeadLines(status: number, headers: OutHeaders, overhead: string | null, contentType?: string): void {
    this.res.writeStatus(statusLine(status));
    if (contentType !== undefined) this.res.writeHeader('content-type', contentType);
    this.res.writeHeader('x-request-id', this.requestId);
    if (overhead !== null) this.res.writeHeader(OVERHEAD_HEADER, overhead);
    this.writeRateHeaders(headers);
    for (const k in headers) {
      const v = headers[k]!;
      if (typeof v === 'string') this.res.writeHeader(k, v);
      else for (const one of v) this.res.writeHeader(k, one);
    }
  }

  private writeRateHeaders(given: OutHeaders): void {
    const r = this.rateHeaders;
    if (r) for (const k in r) if (given[k] === undefined) this.res.writeHeader(k, r[k]!);
  }

  /** Writes a chunk; resolves at once, or when the client has drained its backlog (backpressure). */
  write(chunk: Uint8Array | string): Promise<void> | undefined {
    if (!this.live) return undefined;
    let ok = true;
    this.res.cork(() => {
      if (this.head) this.writeHead(this.head);
      ok = this.res.write(chunk);
    });
    if (ok) return undefined;
    return new Promise((resolve) => {
      this.writableWaiter = () => { this.writableWaiter = null; resolve(); };
      this.res.onWritable(() => { this.writableWaiter?.(); return true; });
    });
  }

  end(chunk?: Uint8Array | string): void {
    if (!this.live) return;
    this.finished = true;
    this.res.cork(() => {
      if (this.head) this.writeHead(this.head);
      this.res.end(chunk);
    });
  }

  /** Drops the connection (a stream that cannot be completed). */
  close(): void {
    if (this.aborted || this.finished) return;
    this.finished = true;
    this.res.close();
  }

  elapsedMs(): number {
    return Number(process.hrtime.bigint() - this.started) / 1e6;
  }

  /** Time so far not spent waiting on the upstream, in ms with microseconds (the x-tollgate-overhead-ms header). */
  overheadMs(): string {
    return (Math.max(0, Number(process.hrtime.bigint() - this.started - this.upstreamNs)) / 1e6).toFixed(3);
  }
}

export function asGatewayError(e: unknown): GatewayError | null {
  return e instanceof GatewayError ? e : null;
}

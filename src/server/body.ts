// Reads a request body from the front end (uWS or node:http) into one Buffer, refusing it with 413 past the route's limit.
import { Readable } from 'node:stream';
import { GatewayError, clientClosed } from '../errors.js';
import type { Ctx } from './context.js';
import { keepChunk } from './io.js';

export function tooLarge(limit: number): GatewayError {
  return new GatewayError({ code: 'request_too_large', message: `The request body is larger than this route's limit of ${limit} bytes.` });
}

/** Must be called synchronously in the uWS handler: uWS hands body chunks over only once. */
export function readBody(ctx: Ctx, limit: number): Promise<Buffer> {
  const declared = Number(ctx.headers['content-length'] ?? NaN);
  if (declared > limit) {
    ctx.res.onData(() => undefined);
    return Promise.reject(tooLarge(limit));
  }
  return new Promise((res, rej) => {
    // The front end keeps these handlers as long as the response runs (a stream: minutes): once the body
    // is whole they let go of it, and of the promise that resolved with it.
    let resolve: ((b: Buffer) => void) | undefined = res;
    let reject: ((e: GatewayError) => void) | undefined = rej;
    let parts: Buffer[] = [];
    let size = 0;
    const settle = (): void => { resolve = undefined; reject = undefined; parts = []; };
    ctx.onAbort(() => { reject?.(clientClosed()); settle(); });
    ctx.res.onData((chunk, isLast) => {
      if (!resolve) return;
      size += chunk.byteLength;
      if (size > limit) { reject!(tooLarge(limit)); settle(); return; }
      parts.push(keepChunk(chunk));
      if (isLast) { const whole = parts.length === 1 ? parts[0]! : Buffer.concat(parts, size); resolve(whole); settle(); }
    });
  });
}

/**
 * The body as a Node Readable, with backpressure: uWS is paused while the reader lags and resumed when
 * it reads. Past `limit` bytes (declared or counted) the stream fails with 413; a client that leaves
 * fails it with client_closed. Must be called synchronously in the uWS handler, like readBody.
 */
export function streamBody(ctx: Ctx, limit: number): BodyStream {
  const declared = Number(ctx.headers['content-length'] ?? NaN);
  let paused = false;
  const canTouch = (): boolean => !ctx.aborted && !ctx.finished;
  const stream = new BodyStream({
    highWaterMark: 256 * 1024,
    read() {
      if (paused && canTouch()) { paused = false; ctx.res.resume(); }
    },
  });
  stream.discard = () => {
    // A reader that stops early (an error, a refusal) must not leave uWS paused: the rest is discarded.
    stream.discarding = true;
    if (paused && canTouch()) { paused = false; ctx.res.resume(); }
  };
  stream.on('close', stream.discard);
  if (declared > limit) {
    stream.discarding = true;
    ctx.res.onData(() => undefined);
    process.nextTick(() => stream.destroy(tooLarge(limit)));
    return stream;
  }
  let size = 0;
  ctx.onAbort(() => { if (!stream.readableEnded) stream.destroy(clientClosed()); });
  ctx.res.onData((chunk, isLast) => {
    if (stream.discarding) return;
    size += chunk.byteLength;
    if (size > limit) { stream.destroy(tooLarge(limit)); return; }
    const more = stream.push(keepChunk(chunk));
    if (isLast) stream.push(null);
    else if (!more && !paused) { paused = true; ctx.res.pause(); }
  });
  return stream;
}

/** A request body stream; `discarding` once its reader is gone (the rest of the body is dropped). */
export class BodyStream extends Readable {
  discarding = false;
  /**
   * Drops the rest of the body as it arrives. Called before a refusal is answered: once the response
   * has ended uWS may no longer be resumed, and a client still sending would wait on a paused socket.
   */
  discard: () => void = () => { this.discarding = true; };
}

// Reads a request body from uWS into one Buffer, refusing it with 413 past the route's limit.
import { GatewayError, clientClosed } from '../errors.js';
import type { Ctx } from './context.js';

export function tooLarge(limit: number): GatewayError {
  return new GatewayError({ status: 413, code: 'request_too_large', message: `The request body is larger than this route's limit of ${limit} bytes.` });
}

/** Must be called synchronously in the uWS handler: uWS hands body chunks over only once. */
export function readBody(ctx: Ctx, limit: number): Promise<Buffer> {
  const declared = Number(ctx.headers['content-length'] ?? NaN);
  if (declared > limit) {
    ctx.res.onData(() => undefined);
    return Promise.reject(tooLarge(limit));
  }
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    let failed = false;
    ctx.onAbort(() => reject(clientClosed()));
    ctx.res.onData((chunk, isLast) => {
      if (failed) return;
      size += chunk.byteLength;
      if (size > limit) { failed = true; reject(tooLarge(limit)); return; }
      // uWS reuses the chunk's memory after this callback returns: copy it.
      parts.push(Buffer.from(chunk.slice(0)));
      if (isLast) resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size));
    });
  });
}

// A Family: one API shape Tollgate serves (its path prefixes, its error envelope, its reading of upstream errors).
import type { IncomingMessage } from 'node:http';
import type { ErrorRenderer, GatewayError, SocketError } from '../errors.js';

export interface Family extends ErrorRenderer {
  readonly name: 'alpha' | 'beta' | 'svc';
  /** Where its routes are mounted: a route's path is appended to each (alpha: `/alpha` and `` so `/v1/...` is an alias). */
  readonly prefixes: readonly string[];
  /** An upstream's error reply as this family's clients should see it (the raw body is logged, never passed on whole). */
  upstreamError(res: IncomingMessage, requestId: string): Promise<GatewayError>;
  /**
   * An error that ends a session (WebSocket), rendered as `render` renders it over HTTP: the family's
   * error frame, then the close code (errors.ts closeCode: from the catalog) and a reason of at most 123 bytes.
   */
  renderSocket(err: GatewayError, requestId: string, replyTo?: string | null): SocketError;
}


// The routing table: each family's routes mounted under its prefixes; unknown paths are 404, known paths with other methods 405.
import type { Readable } from 'node:stream';
import { GatewayError, type ErrorRenderer } from '../errors.js';
import type { Scope } from '../store/keys.js';
import type { Ctx } from './context.js';
import type { SocketRoute } from './ws.js';

/** What a handler gets: path captures, and the body read whole (`buffer`) or as a stream (`stream`). */
export interface RouteInput { params: Record<string, string>; body: Buffer | null; stream: Readable | null }

export interface Route {
  method: 'GET' | 'POST' | 'DELETE' | 'PATCH' | 'PUT';
  path: string;                       // under the mount's prefixes; segments; `:name` captures one
  name: string;                       // metrics label
  scope: Scope | 'any' | 'public';    // 'public' = no key (webhook, health, metrics, console login)
  /** The handler admits the request itself, with money (it opens a Charge); others are admitted for rpm and concurrency only. */
  metered?: boolean;
  bodyLimit?: number;
  /** `buffer` (default): the body read whole into `input.body`; `stream`: handed over unread as `input.stream`. */
  body?: 'buffer' | 'stream';
  handler(ctx: Ctx, input: RouteInput): Promise<void>;
}

/** What a family hands the router: its renderer and prefixes, and its routes. */
export interface Mount {
  family: ErrorRenderer & { readonly prefixes: readonly string[] };
  routes: Route[];
  /** WebSocket routes (an upgrade request on their path). */
  sockets?: SocketRoute[];
  /** Mount under these prefixes instead of the family's own (console pages, health, metrics). */
  prefixes?: readonly string[];
}

interface Compiled { route: Route; family: ErrorRenderer; parts: string[] }

export type Match =
  | { route: Route; family: ErrorRenderer; params: Record<string, string> }
  | { allowed: string[]; family: ErrorRenderer }
  | { family: ErrorRenderer };

export class Router {
  private readonly exact = new Map<string, Map<string, { route: Route; family: ErrorRenderer }>>();
  private readonly patterns: Compiled[] = [];
  private readonly sockets: { route: SocketRoute; family: ErrorRenderer; parts: string[] }[] = [];
  /** Family prefixes, longest first: the envelope of a path that matches no route. */
  private readonly owners: { prefix: string; family: ErrorRenderer }[] = [];

  constructor(mounts: Mount[], private readonly fallback: ErrorRenderer) {
    for (const m of mounts) {
      for (const prefix of m.family.prefixes) if (!this.owners.some((o) => o.prefix === prefix)) this.owners.push({ prefix, family: m.family });
      for (const prefix of m.prefixes ?? m.family.prefixes) {
        for (const r of m.sockets ?? []) this.sockets.push({ route: r, family: m.family, parts: (prefix + r.path).split('/') });
        for (const r of m.routes) {
          const path = prefix + r.path;
          if (r.path.includes(':')) { this.patterns.push({ route: r, family: m.family, parts: path.split('/') }); continue; }
          const byMethod = this.exact.get(path) ?? new Map<string, { route: Route; family: ErrorRenderer }>();
          byMethod.set(r.method, { route: r, family: m.family });
          this.exact.set(path, byMethod);
        }
      }
    }
    this.owners.sort((a, b) => b.prefix.length - a.prefix.length);
  }

  match(method: string, path: string): Match {
    const byMethod = this.exact.get(path);
    const allowed: string[] = byMethod ? [...byMethod.keys()] : [];
    const hit = byMethod?.get(method);
    if (hit) return { route: hit.route, family: hit.family, params: {} };
    const segs = path.split('/');
    for (const c of this.patterns) {
      const params = matchParts(c.parts, segs);
      if (!params) continue;
      if (c.route.method === method) return { route: c.route, family: c.family, params };
      allowed.push(c.route.method);
    }
    const family = this.familyOf(path);
    return allowed.length > 0 ? { allowed, family } : { family };
  }

  /** The WebSocket route on this path, if any. */
  matchSocket(path: string): { route: SocketRoute; family: ErrorRenderer; params: Record<string, string> } | null {
    const segs = path.split('/');
    for (const c of this.sockets) {
      const params = matchParts(c.parts, segs);
      if (params) return { route: c.route, family: c.family, params };
    }
    return null;
  }

  /** The largest frame any WebSocket route takes (uWS applies one limit; routes check their own). */
  get maxSocketMessage(): number {
    return Math.max(16 * 1024, ...this.sockets.map((s) => s.route.maxMessageBytes));
  }

  /** The family whose prefix a path falls under (longest first), for the envelope of an error. */
  familyOf(path: string): ErrorRenderer {
    for (const o of this.owners) if (o.prefix === '' || path === o.prefix || path.startsWith(`${o.prefix}/`)) return o.family;
    return this.fallback;
  }
}

function matchParts(parts: string[], segs: string[]): Record<string, string> | null {
  if (parts.length !== segs.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    const s = segs[i]!;
    if (p.startsWith(':')) {
      if (!s) return null;
      try { params[p.slice(1)] = decodeURIComponent(s); } catch { return null; }
    } else if (p !== s) return null;
  }
  return params;
}

export function methodNotAllowed(method: string, allowed: string[]): GatewayError {
  return new GatewayError({ code: 'method_not_allowed', message: `${method} is not allowed here; use ${allowed.join(' or ')}.`,
    headers: { allow: allowed.join(', ') } });
}

// The routing table: method + path pattern to a route; unknown paths are 404, known paths with other methods 405.
import { GatewayError } from '../errors.js';
import type { Scope } from '../store/keys.js';
import type { Ctx } from './context.js';

export interface RouteInput { params: Record<string, string>; body: Buffer | null }

export interface Route {
  method: 'GET' | 'POST' | 'DELETE' | 'PATCH' | 'PUT';
  path: string;                       // segments; `:name` captures one
  name: string;                       // metrics label
  scope: Scope | 'any' | 'public';    // 'public' = no key (webhook, health, metrics, console login)
  bodyLimit?: number;
  handler(ctx: Ctx, input: RouteInput): Promise<void>;
}

interface Compiled { route: Route; parts: string[] }

export type Match = { route: Route; params: Record<string, string> } | { allowed: string[] } | null;

export class Router {
  private readonly exact = new Map<string, Map<string, Route>>();
  private readonly patterns: Compiled[] = [];

  constructor(routes: Route[]) {
    for (const r of routes) {
      if (r.path.includes(':')) this.patterns.push({ route: r, parts: r.path.split('/') });
      else {
        const byMethod = this.exact.get(r.path) ?? new Map<string, Route>();
        byMethod.set(r.method, r);
        this.exact.set(r.path, byMethod);
      }
    }
  }

  match(method: string, path: string): Match {
    const byMethod = this.exact.get(path);
    const allowed: string[] = byMethod ? [...byMethod.keys()] : [];
    const hit = byMethod?.get(method);
    if (hit) return { route: hit, params: {} };
    const segs = path.split('/');
    for (const c of this.patterns) {
      const params = matchParts(c.parts, segs);
      if (!params) continue;
      if (c.route.method === method) return { route: c.route, params };
      allowed.push(c.route.method);
    }
    return allowed.length > 0 ? { allowed } : null;
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
  return new GatewayError({ status: 405, code: 'method_not_allowed', message: `${method} is not allowed here; use ${allowed.join(' or ')}.`,
    headers: { allow: allowed.join(', ') } });
}

/** `/v1/...` is an alias of `/alpha/v1/...`. */
export function canonicalPath(path: string): string {
  return path.startsWith('/v1/') || path === '/v1' ? `/alpha${path}` : path;
}

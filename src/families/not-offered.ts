// Routes the official clients call in a group Tollgate covers but that it deliberately does not offer: each answers
// 404 `not_offered` with its reason in the family's envelope, never the generic "no route" (docs/compatibility.md).
import { notOffered } from '../errors.js';
import type { Route } from '../server/router.js';

export interface NotOffered {
  method: Route['method'];
  /** The path under the family's prefix, `:name` for a path parameter (as a route's path). */
  path: string;
  /** Why, in a sentence a client's user reads (what to use instead, where there is something). */
  reason: string;
}

/** One route per entry, for any valid key (the answer is the same whatever the key may do). */
export function notOfferedRoutes(family: 'alpha' | 'beta', table: readonly NotOffered[]): Route[] {
  return table.map((n) => ({
    method: n.method, path: n.path, name: `${family}.not_offered`, scope: 'any',
    handler: async () => { throw notOffered(`${n.method} ${n.path.replace(/:(\w+)/g, '{$1}')}`, n.reason); },
  }));
}

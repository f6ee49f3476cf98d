// Model ids and aliases to their config, and the nearest known id for a "did you mean" hint.
import type { ModelConfig } from '../config.js';
import { GatewayError } from '../errors.js';

export class ModelRegistry {
  private readonly byName = new Map<string, ModelConfig>();

  constructor(readonly models: readonly ModelConfig[]) {
    for (const m of models) {
      this.byName.set(m.id, m);
      for (const a of m.aliases) this.byName.set(a, m);
    }
  }

  find(name: string): ModelConfig | undefined {
    return this.byName.get(name);
  }

  /**
   * The model for `name` of one of the wanted kinds, or 404 model_not_found naming the nearest id of
   * those kinds (a route's suggestion is always a model that route serves).
   */
  resolve(name: string, kind?: ModelConfig['kind'] | readonly ModelConfig['kind'][]): ModelConfig {
    const kinds = kind === undefined ? undefined : typeof kind === 'string' ? [kind] : kind;
    const fits = (v: ModelConfig) => !kinds || kinds.includes(v.kind);
    const m = this.byName.get(name);
    if (m && fits(m)) return m;
    // An id longer than any model's is no typo: no suggestion (the search is quadratic in the length).
    const pool = [...this.byName.entries()].filter(([, v]) => fits(v)).map(([k]) => k);
    const near = name.length <= MAX_ID ? nearest(name, pool) : undefined;
    const hint = near ? ` Did you mean \`${near}\`?` : '';
    const what = m ? ` is not a ${kinds!.join(' or ')} model.` : ' does not exist.';
    throw new GatewayError({
      code: 'model_not_found', param: 'model',
      message: `The model \`${shown(name)}\`${what}${hint}`,
    });
  }
}

/** The longest id that is looked for near matches; longer ones are answered at once. */
export const MAX_ID = 256;

/** A client's value as an error message quotes it: never more than a short prefix. */
export function shown(value: string, max = 64): string {
  return value.length <= max ? value : `${value.slice(0, max)}… (${value.length} characters)`;
}

export function nearest(name: string, pool: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  const lower = name.toLowerCase();
  for (const cand of pool) {
    const d = levenshtein(lower, cand.toLowerCase());
    if (d < bestD || (d === bestD && best !== undefined && cand < best)) { best = cand; bestD = d; }
  }
  return best;
}

export function levenshtein(a: string, b: string): number {
  if (a === b) return 0;
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}

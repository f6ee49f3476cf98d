// A JSON value that conforms to a JSON Schema (the subset Structured Outputs and function parameters use), deterministic from a seed.
import { mulberry32, VOCAB } from './tokens.js';

type Obj = Record<string, unknown>;

/** Deeper than this, a recursive schema gets the smallest value it allows. */
const MAX_DEPTH = 8;

/** Fixed values for the string formats a client may parse (pydantic's datetime, date, UUID…). */
const FORMATS: Record<string, string> = {
  'date-time': '2026-01-01T12:00:00Z', date: '2026-01-01', time: '12:00:00', duration: 'P1D',
  email: 'sim@example.com', hostname: 'example.com', uri: 'https://example.com/sim', 'uri-reference': '/sim',
  uuid: '00000000-0000-4000-8000-000000000000', ipv4: '192.0.2.1', ipv6: '2001:db8::1',
};

/**
 * A value satisfying `schema`: `$ref`s to `#/$defs/…` or `#/definitions/…` followed, `const` and
 * `enum` taken as given, the first non-null branch of `anyOf`/`oneOf`, every property of an object
 * (the required ones always), arrays of `minItems` items (at least one unless `maxItems` is 0),
 * numbers inside their bounds, strings of a known `format` or words within `minLength`/`maxLength`.
 */
export function schemaValue(schema: unknown, seed: number): unknown {
  const r = mulberry32(seed ^ 0x2545f491);
  const root = (schema && typeof schema === 'object' ? schema : {}) as Obj;
  const word = () => VOCAB[(r() * VOCAB.length) | 0]!;

  const resolve = (s: Obj): Obj => {
    for (let hops = 0; typeof s.$ref === 'string' && hops < 32; hops++) {
      const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(s.$ref as string);
      const defs = m ? (root[m[1]!] as Obj | undefined) : undefined;
      const target = defs?.[decodeURIComponent(m![2]!).replace(/~1/g, '/').replace(/~0/g, '~')];
      if (!target || typeof target !== 'object') return {};
      s = { ...(target as Obj), ...Object.fromEntries(Object.entries(s).filter(([k]) => k !== '$ref')) };
    }
    return s;
  };

  const text = (o: Obj): string => {
    if (typeof o.format === 'string' && FORMATS[o.format] !== undefined) return FORMATS[o.format]!;
    const min = typeof o.minLength === 'number' ? o.minLength : 0;
    const max = typeof o.maxLength === 'number' ? o.maxLength : Infinity;
    let s = word();
    while (s.length < min) s += ` ${word()}`;
    return s.length > max ? s.slice(0, max) : s;
  };

  const number = (o: Obj, integer: boolean): number => {
    let lo = typeof o.minimum === 'number' ? o.minimum : typeof o.exclusiveMinimum === 'number' ? o.exclusiveMinimum + (integer ? 1 : 0.5) : -Infinity;
    let hi = typeof o.maximum === 'number' ? o.maximum : typeof o.exclusiveMaximum === 'number' ? o.exclusiveMaximum - (integer ? 1 : 0.5) : Infinity;
    if (integer) { lo = Math.ceil(lo); hi = Math.floor(hi); }
    const pick = 1 + ((r() * 9) | 0);
    if (pick >= lo && pick <= hi) return pick;
    return Number.isFinite(lo) ? lo : Number.isFinite(hi) ? hi : pick;
  };

  const value = (raw: unknown, depth: number): unknown => {
    if (!raw || typeof raw !== 'object' || depth > 4 * MAX_DEPTH) return null; // a schema with no finite value
    const o = resolve(raw as Obj);
    if ('const' in o) return o.const;
    if (Array.isArray(o.enum) && o.enum.length > 0) return o.enum[0];
    for (const k of ['anyOf', 'oneOf', 'allOf'] as const) {
      const alts = o[k];
      if (Array.isArray(alts) && alts.length > 0) {
        // Past the depth limit a nullable branch ends the recursion.
        const pick = depth > MAX_DEPTH ? alts.find((a) => (a as Obj | null)?.type === 'null') : undefined;
        return value(pick ?? alts.find((a) => (a as Obj | null)?.type !== 'null') ?? alts[0], depth + 1);
      }
    }
    const type = Array.isArray(o.type) ? (o.type.find((t) => t !== 'null') ?? 'null') : o.type;
    switch (type) {
      case 'string': return text(o);
      case 'number': return number(o, false);
      case 'integer': return number(o, true);
      case 'boolean': return true;
      case 'null': return null;
      case 'array': {
        const min = typeof o.minItems === 'number' ? o.minItems : 0;
        const max = typeof o.maxItems === 'number' ? o.maxItems : Infinity;
        const n = Math.min(Math.max(min, depth > MAX_DEPTH ? 0 : 1), max);
        return Array.from({ length: n }, () => value(o.items ?? { type: 'string' }, depth + 1));
      }
      default: {
        const props = o.properties && typeof o.properties === 'object' ? (o.properties as Obj) : {};
        const out: Obj = {};
        for (const [k, v] of Object.entries(props)) out[k] = value(v, depth + 1);
        if (Array.isArray(o.required)) for (const k of o.required) if (typeof k === 'string' && !(k in out)) out[k] = word();
        if (type === undefined && Object.keys(out).length === 0 && !o.properties && depth > 0) return word();
        return out;
      }
    }
  };
  return value(root, 0);
}

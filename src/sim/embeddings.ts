// POST /v1/embeddings: input checks, deterministic unit vectors from the input text, float or base64 encoding.
import { SimError } from './http.js';
import { countTokens, fnv1a, mulberry32 } from './tokens.js';
import type { SimModel } from './index.js';

type Obj = Record<string, unknown>;

/** Encoded vectors by dimensions|format|input: benchmarks send the same inputs over and over. */
const cache = new Map<string, string>();
const CACHE_MAX = 512;

/**
 * A unit vector (L2 norm 1) deterministic from the text. A shorter `dims` takes the first components of the same
 * sequence and renormalises them, so a shortened embedding points the way the full one's prefix does (as OpenAI's do).
 */
export function embedVector(text: string, dims: number): Float32Array {
  const r = mulberry32(fnv1a(text));
  const raw = new Float64Array(dims);
  let norm = 0;
  for (let i = 0; i < dims; i++) { const x = r() * 2 - 1; raw[i] = x; norm += x * x; }
  norm = Math.sqrt(norm) || 1;
  const v = new Float32Array(dims);
  for (let i = 0; i < dims; i++) v[i] = raw[i]! / norm;
  return v;
}

/** Little-endian float32 bytes, base64 (what OpenAI sends for encoding_format: base64). */
function base64(v: Float32Array): string {
  const b = Buffer.allocUnsafe(v.length * 4);
  for (let i = 0; i < v.length; i++) b.writeFloatLE(v[i]!, i * 4);
  return b.toString('base64');
}

function encoded(key: string, text: string, dims: number, b64: boolean): string {
  const hit = cache.get(key);
  if (hit !== undefined) return hit;
  const v = embedVector(text, dims);
  const out = b64 ? `"${base64(v)}"` : JSON.stringify(Array.from(v));
  if (cache.size >= CACHE_MAX) cache.clear();
  cache.set(key, out);
  return out;
}

function inputs(input: unknown): (string | number[])[] {
  const isIds = (x: unknown): x is number[] => Array.isArray(x) && x.length > 0 && x.every((y) => typeof y === 'number' && Number.isInteger(y));
  if (typeof input === 'string') return [input];
  if (isIds(input)) return [input];
  if (Array.isArray(input) && input.length > 0 && input.length <= 2048 && input.every((x) => typeof x === 'string' || isIds(x))) {
    return input as (string | number[])[];
  }
  throw new SimError(400, "'input' is required: a string, an array of strings, or token id arrays (at most 2048 items).", 'input');
}

export function embeddingsBody(model: SimModel, body: Obj): string {
  const items = inputs(body.input);
  const full = model.dimensions ?? 384;
  let dims = full;
  if (body.dimensions !== undefined && body.dimensions !== null) {
    const d = body.dimensions;
    if (typeof d !== 'number' || !Number.isInteger(d) || d < 1 || d > full) throw new SimError(400, `'dimensions' must be an integer from 1 to ${full}.`, 'dimensions');
    dims = d;
  }
  const format = body.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64') throw new SimError(400, "'encoding_format' must be float or base64.", 'encoding_format');
  const b64 = format === 'base64';
  let tokens = 0;
  let data = '';
  items.forEach((it, index) => {
    const text = typeof it === 'string' ? it : `\u0000ids:${it.join(',')}`;
    tokens += typeof it === 'string' ? countTokens(it) : it.length;
    const e = encoded(`${dims}|${format}|${text}`, text, dims, b64);
    data += `${index ? ',' : ''}{"object":"embedding","index":${index},"embedding":${e}}`;
  });
  return `{"object":"list","data":[${data}],"model":${JSON.stringify(model.id)},"usage":{"prompt_tokens":${tokens},"total_tokens":${tokens}}}`;
}

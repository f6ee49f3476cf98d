// Parses a JSON body against a compiled TypeBox schema: 422 with the first bad field as `param` and a detail list.
import type { TSchema, Static } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { GatewayError, type ValidationDetail } from '../errors.js';

export function compile<T extends TSchema>(schema: T): TypeCheck<T> {
  return TypeCompiler.Compile(schema);
}

/** Deeper bodies are refused before they are parsed: no request needs them, and they make recursion throw. */
export const MAX_JSON_DEPTH = 64;

/** How deeply objects and arrays nest in JSON text, stopping as soon as it passes `max`. */
export function jsonDepth(buf: Buffer, max = MAX_JSON_DEPTH): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i]!;
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) { if (++depth > deepest) { deepest = depth; if (deepest > max) return deepest; } }
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return deepest;
}

export function parseJson<T extends TSchema>(check: TypeCheck<T>, body: Buffer | null): Static<T> {
  if (body && jsonDepth(body) > MAX_JSON_DEPTH) {
    throw new GatewayError({ status: 400, code: 'invalid_json', message: `The request body nests objects or arrays deeper than ${MAX_JSON_DEPTH} levels.` });
  }
  let value: unknown;
  try {
    value = JSON.parse(body && body.length > 0 ? body.toString('utf8') : '');
  } catch {
    throw new GatewayError({ status: 400, code: 'invalid_json', message: 'The request body is not valid JSON.',
      detail: undefined });
  }
  if (check.Check(value)) return value;
  const detail: ValidationDetail[] = [];
  for (const e of check.Errors(value)) {
    const loc: (string | number)[] = ['body', ...e.path.split('/').filter(Boolean).map((p) => (/^\d+$/.test(p) ? Number(p) : p))];
    if (detail.some((d) => d.loc.join('.') === loc.join('.'))) continue;
    detail.push({ loc, msg: e.message, type: typeName(e.schema) });
    if (detail.length >= 20) break;
  }
  const first = detail[0];
  const param = first ? first.loc.slice(1).join('.') || null : null;
  throw new GatewayError({
    status: 422, code: 'validation_error', param,
    message: first ? `Invalid request body: ${param ?? 'body'}: ${first.msg}.` : 'Invalid request body.',
    detail,
  });
}

function typeName(s: TSchema): string {
  const t = (s as { type?: unknown }).type;
  return typeof t === 'string' ? `${t}_type` : 'value_error';
}

/** Throws 400 unsupported_parameter for the first of `params` the request asks for (null and false ask for nothing). */
export function rejectAsked(req: Record<string, unknown>, params: readonly string[]): void {
  for (const p of params) {
    const v = req[p];
    if (v !== undefined && v !== null && v !== false) throw unsupported(p);
  }
}

export function unsupported(param: string, why = ''): GatewayError {
  return new GatewayError({ status: 400, code: 'unsupported_parameter', param,
    message: `Unsupported parameter: '${param}' is not supported by this service${why ? `: ${why}` : ''}.` });
}

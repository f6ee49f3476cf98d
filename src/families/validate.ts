// Parses a JSON body (its content type, encoding and depth first) against a compiled TypeBox schema: 422 with the first bad field as `param`.
import type { TSchema, Static } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { isUtf8 } from 'node:buffer';
import { GatewayError, type ValidationDetail } from '../errors.js';
import { explain, paramOf } from './explain.js';

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

/** A JSON route's content type: `application/json` or any `+json` type, with or without parameters. */
const JSON_TYPE = /^application\/([a-z0-9.+-]+\+)?json\s*(;|$)/i;

/**
 * The body of a JSON route, parsed and checked: a body without a JSON content type, not UTF-8, not
 * JSON or nested too deeply is refused before anything else is done (nothing reaches an upstream or
 * is billed); one the schema rejects is 422 naming the first bad field as `param`, with a `detail` list.
 */
export function parseJson<T extends TSchema>(check: TypeCheck<T>, body: Buffer | null, contentType: string | undefined): Static<T> {
  if (!contentType || !JSON_TYPE.test(contentType)) {
    throw new GatewayError({ code: 'unsupported_media_type', message: contentType
      ? `This route takes a JSON body: send \`Content-Type: application/json\` (got \`${shown(contentType)}\`).`
      : 'This route takes a JSON body: send `Content-Type: application/json` (the request had no Content-Type).' });
  }
  if (body && !isUtf8(body)) {
    throw new GatewayError({ code: 'invalid_encoding', message: 'The request body is not valid UTF-8: JSON bodies must be UTF-8 text.' });
  }
  if (body && jsonDepth(body) > MAX_JSON_DEPTH) {
    throw new GatewayError({ code: 'invalid_json', message: `The request body nests objects or arrays deeper than ${MAX_JSON_DEPTH} levels.` });
  }
  let value: unknown;
  try {
    value = JSON.parse(body && body.length > 0 ? body.toString('utf8') : '');
  } catch {
    throw new GatewayError({ code: 'invalid_json', message: 'The request body is not valid JSON.' });
  }
  if (check.Check(value)) return value;
  const detail: ValidationDetail[] = [];
  for (const e of check.Errors(value)) {
    const path = e.path.split('/').filter(Boolean).map((p) => (/^\d+$/.test(p) ? Number(p) : p.replace(/~1/g, '/').replace(/~0/g, '~')));
    const loc: (string | number)[] = ['body', ...path];
    if (detail.some((d) => d.loc.join('.') === loc.join('.'))) continue;
    detail.push({ loc, msg: explain(e, path), type: typeName(e.schema) });
    if (detail.length >= 20) break;
  }
  const first = detail[0];
  throw new GatewayError({
    code: 'validation_error', param: first && first.loc.length > 1 ? paramOf(first.loc.slice(1)) : null,
    message: first ? first.msg : 'Invalid request body.',
    detail,
  });
}

function shown(text: string): string {
  return text.length > 60 ? `${text.slice(0, 60)}…` : text;
}

function typeName(s: TSchema): string {
  const t = (s as { type?: unknown }).type;
  return typeof t === 'string' ? `${t}_type` : 'value_error';
}

/** Throws 400 invalid_value naming `field` when the request asks for more output tokens than the model gives. */
export function atMostOutput(req: Record<string, unknown>, fields: readonly string[], model: { id: string; maxOutputTokens: number }): void {
  for (const f of fields) {
    const v = req[f];
    if (typeof v === 'number' && v > model.maxOutputTokens) {
      throw new GatewayError({ code: 'invalid_value', param: f,
        message: `\`${f}\` is too large: ${v}. The model \`${model.id}\` produces at most ${model.maxOutputTokens} output tokens per request; ask for ${model.maxOutputTokens} or fewer.` });
    }
  }
}

/** Throws 400 unsupported_parameter for the first of `params` the request asks for (null and false ask for nothing). */
export function rejectAsked(req: Record<string, unknown>, params: readonly string[]): void {
  for (const p of params) {
    const v = req[p];
    if (v !== undefined && v !== null && v !== false) throw unsupported(p);
  }
}

export function unsupported(param: string, why = ''): GatewayError {
  return new GatewayError({ code: 'unsupported_parameter', param,
    message: `Unsupported parameter: '${param}' is not supported by this service${why ? `: ${why}` : ''}.` });
}

/** OpenAI's bounds on `metadata` (its API reference): at most 16 pairs, keys of at most 64 characters, string values of at most 512. */
export const METADATA_LIMITS = { pairs: 16, keyChars: 64, valueChars: 512 } as const;

const chars = (s: string): number => (s.length <= 512 ? [...s].length : s.length);

function badMetadata(param: string, why: string): GatewayError {
  return new GatewayError({ code: 'invalid_value', param,
    message: `\`${param}\` ${why}: it holds at most ${METADATA_LIMITS.pairs} pairs, keys of at most ${METADATA_LIMITS.keyChars} characters and string values of at most ${METADATA_LIMITS.valueChars}.` });
}

/** Refuses (400, naming the field) a `metadata` past OpenAI's bounds; absent or null passes. */
export function checkMetadata(v: unknown, param = 'metadata'): void {
  if (v === undefined || v === null) return;
  if (typeof v !== 'object' || Array.isArray(v)) throw badMetadata(param, 'must be an object of string values');
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > METADATA_LIMITS.pairs) throw badMetadata(param, `has ${entries.length} pairs`);
  for (const [k, val] of entries) {
    if (chars(k) > METADATA_LIMITS.keyChars) throw badMetadata(param, `has a key of ${chars(k)} characters ("${k.slice(0, 32)}…")`);
    if (typeof val !== 'string') throw badMetadata(param, `has a value that is not a string (key "${k}")`);
    if (chars(val) > METADATA_LIMITS.valueChars) throw badMetadata(param, `has a value of ${chars(val)} characters (key "${k}")`);
  }
}

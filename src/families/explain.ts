// Says in words what a schema wants of a body's field and what the body sent instead: the messages of 422s.
import type { TSchema } from '@sinclair/typebox';
import { ValueErrorType, type ValueError } from '@sinclair/typebox/errors';

type Schema = TSchema & Record<string, unknown>;

/** A field as OpenAI names it in `param`: `messages[0].content`. */
export function paramOf(path: readonly (string | number)[]): string {
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? p : `.${p}`)).join('');
}

/** One schema failure as a sentence that names the field, what it must be, and what was sent. */
export function explain(e: ValueError, path: readonly (string | number)[]): string {
  const field = path.length > 0 ? `\`${paramOf(path)}\`` : 'The request body';
  if (e.type === ValueErrorType.ObjectAdditionalProperties) return `${field} is not a field of this request.`;
  const want = expected(e.schema as Schema);
  if (e.type === ValueErrorType.ObjectRequiredProperty || e.value === undefined) return `${field} is required: ${want}.`;
  return `${field} must be ${want}; got ${shownValue(e.value)}.`;
}

/** What a schema accepts, in words ("a number from 0 to 2", "one of `user`, `assistant`"); a schema's `expected` says it itself. */
export function expected(s: Schema): string {
  if (typeof s.expected === 'string') return s.expected;
  if (Array.isArray(s.anyOf)) {
    // null means "the default" wherever it is allowed: the sentence names the real choices.
    const members = (s.anyOf as Schema[]).filter((m) => m.type !== 'null');
    if (members.length > 0 && members.every((m) => 'const' in m)) return `one of ${members.map((m) => `\`${String(m.const)}\``).join(', ')}`;
    return [...new Set(members.map(expected))].join(' or ');
  }
  if ('const' in s) return `\`${String(s.const)}\``;
  switch (s.type) {
    case 'number': return range('a number', s);
    case 'integer': return range('an integer', s);
    case 'string': return s.minLength === 1 ? 'a non-empty string' : 'a string';
    case 'boolean': return 'true or false';
    case 'array': return s.minItems === 1 ? 'a non-empty array' : typeof s.minItems === 'number' && s.minItems > 1 ? `an array of at least ${s.minItems} items` : 'an array';
    case 'object': return 'an object';
    case 'null': return 'null';
    default: return 'a valid value';
  }
}

function range(noun: string, s: Schema): string {
  const min = typeof s.minimum === 'number' ? s.minimum : undefined;
  const max = typeof s.maximum === 'number' ? s.maximum : undefined;
  if (min !== undefined && max !== undefined) return `${noun} from ${min} to ${max}`;
  if (min !== undefined) return `${noun} of at least ${min}`;
  if (max !== undefined) return `${noun} of at most ${max}`;
  return noun;
}

/** A value as a message quotes it: short, and never a whole object. */
export function shownValue(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  if (Array.isArray(v)) return v.length === 0 ? 'an empty array' : 'an array';
  return typeof v === 'object' ? 'an object' : typeof v;
}

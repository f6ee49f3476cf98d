// Token estimates for replies that report no usage: one tokenizer, shared with the simulated upstream.

/**
 * Counts tokens as Tollgate estimates them (and as the sim's "model" produces them): the number of matches of /\w+|[^\w\s]/gu (a run of ASCII word
 * characters is one token, every other non-space code point is one token). Hand-rolled for speed; the test suite
 * checks it against the regular expression.
 */
export function countTokens(text: string): number {
  let n = 0;
  let inWord = false;
  const len = text.length;
  for (let i = 0; i < len; i++) {
    const c = text.charCodeAt(i);
    if (isWordCode(c)) {
      if (!inWord) { n++; inWord = true; }
      continue;
    }
    inWord = false;
    if (isSpaceCode(c)) continue;
    n++;
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < len) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++; // a surrogate pair is one code point under the `u` flag
    }
  }
  return n;
}

export function isWordCode(c: number): boolean {
  return (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 95;
}

/** JavaScript's \s: ASCII whitespace plus the Unicode space separators, line/paragraph separators and BOM. */
export function isSpaceCode(c: number): boolean {
  if (c < 128) return c === 32 || (c >= 9 && c <= 13);
  return c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029
    || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;
}

type Obj = Record<string, unknown>;

/** Chat prompt tokens: per message 3 + its text (string content, text parts, tool call names and arguments), plus 3. */
export function chatPromptTokens(messages: readonly Obj[]): number {
  let n = 3;
  for (const m of messages) {
    n += 3;
    const c = m.content;
    if (typeof c === 'string') n += countTokens(c);
    else if (Array.isArray(c)) for (const p of c as Obj[]) if (p && typeof p.text === 'string') n += countTokens(p.text);
    if (Array.isArray(m.tool_calls)) {
      for (const tc of m.tool_calls as Obj[]) {
        const f = (tc?.function ?? {}) as Obj;
        if (typeof f.name === 'string') n += countTokens(f.name);
        if (typeof f.arguments === 'string') n += countTokens(f.arguments);
      }
    }
  }
  return n;
}

/** Completion prompt tokens: text is counted, token arrays are their length. */
export function promptTokens(p: string | readonly (string | number | readonly number[])[]): number {
  if (typeof p === 'string') return countTokens(p);
  if (p.length > 0 && p.every((x) => typeof x === 'number')) return p.length;
  let n = 0;
  for (const x of p) n += typeof x === 'string' ? countTokens(x) : Array.isArray(x) ? x.length : 1;
  return n;
}

/** Output tokens of a buffered chat or completions reply: the text each choice picked out. */
export function choicesTokens(json: Obj, pick: (c: Obj) => unknown): number {
  let out = 0;
  for (const c of (json.choices as Obj[] | undefined) ?? []) {
    const t = pick(c);
    if (typeof t === 'string') out += countTokens(t);
  }
  return out;
}

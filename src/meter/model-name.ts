// Names the model in an upstream's JSON text as Tollgate does: one `model` value replaced in place, every other byte untouched.

const KEY = '"model"';
const isSpace = (c: number) => c === 0x20 || c === 0x09 || c === 0x0d || c === 0x0a;

/** Where the value of the key that ends just before `i` starts, or -1 when `i` is not followed by `:` (not a key). */
function valueAt(s: string, i: number): number {
  while (isSpace(s.charCodeAt(i))) i++;
  if (s.charCodeAt(i) !== 0x3a) return -1;
  i++;
  while (isSpace(s.charCodeAt(i))) i++;
  return i;
}

/** Just past the closing quote of the JSON string that opens at `i`; -1 when it does not close before `to`. */
function stringEnd(s: string, i: number, to: number): number {
  // From quote to quote (a native search, faster than reading each character here); a quote after an odd
  // run of backslashes is escaped, inside the string.
  for (let j = s.indexOf('"', i + 1); j >= 0 && j < to; j = s.indexOf('"', j + 1)) {
    let k = j - 1;
    while (s.charCodeAt(k) === 0x5c) k--;
    if ((j - 1 - k) % 2 === 0) return j + 1;
  }
  return -1;
}

/**
 * The JSON text `s` (its part from `from` to `to`) with the string at `path` (keys from the outermost
 * object, e.g. `['model']` or `['response', 'model']`) replaced by `ours` (a JSON string, quotes
 * included). The very same string comes back when nothing changes, so a caller can tell by identity.
 *
 * The common case costs one `indexOf`: no `"model"` key, or every one already holding `ours`. (In JSON
 * text an unescaped quote only ever delimits a string, so a quoted name followed by a colon is a key,
 * never text the model wrote.) Only when one differs is the text walked, to find the key at `path`
 * itself and leave a `model` anywhere else (a Responses tool's own `model`) as it came.
 */
export function nameModel(s: string, path: readonly string[], ours: string, from = 0, to = s.length): string {
  let differs = false;
  for (let i = s.indexOf(KEY, from); i >= 0 && i < to; i = s.indexOf(KEY, i + KEY.length)) {
    const v = valueAt(s, i + KEY.length);
    // `ours` ends in its closing quote, so a value that starts with it is it.
    if (v >= 0 && s.charCodeAt(v) === 0x22 && !s.startsWith(ours, v)) { differs = true; break; }
  }
  return differs ? replaceAt(s, path, ours, from, to) : s;
}

/** Walks JSON text once, tracking the keys of the open objects, and replaces the string value at `path`. */
function replaceAt(s: string, path: readonly string[], ours: string, from: number, to: number): string {
  const keyed = path.map((k) => JSON.stringify(k));
  // Per open container: whether its keys (so far) lie on `path` (an array's elements never do).
  const onPath: boolean[] = [];
  let key: string | null = null; // the key whose value comes next
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22) {
      const end = stringEnd(s, i, to);
      if (end < 0) return s;
      const v = valueAt(s, end);
      if (v >= 0) { key = s.slice(i, end); i = v - 1; continue; } // a key: its value follows
      const depth = onPath.length;
      if (key !== null && depth === path.length && onPath[depth - 1] && key === keyed[depth - 1]) {
        return end - i === ours.length && s.startsWith(ours, i) ? s : s.slice(0, i) + ours + s.slice(end);
      }
      key = null;
      i = end - 1;
    } else if (c === 0x7b || c === 0x5b) {
      const depth = onPath.length;
      // The outermost object is on the path; a nested one is when its parent is and its key is the path's next.
      onPath.push(c === 0x7b && (depth === 0 || (onPath[depth - 1] === true && depth < path.length && key === keyed[depth - 1])));
      key = null;
    } else if (c === 0x7d || c === 0x5d) {
      onPath.pop();
      if (onPath.length === 0) return s;
    } else if (c === 0x2c) key = null;
  }
  return s;
}

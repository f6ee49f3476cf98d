// Where a streamed reply's text can be cut for speech: after a sentence (or, in a run-on, a word), so the speech model gets whole sentences as they complete.

/** A chunk is at least this many characters: short sentences ("Yes.") are spoken with the next. */
export const MIN_CHUNK = 20;
/** A run-on past this many characters is cut at its last space. */
export const MAX_CHUNK = 400;

const END = new Set(['.', '!', '?', '…', '。', '！', '？', '\n']);

/**
 * The index to cut `text` at (the chunk is `text.slice(0, cut)`), or 0 while no chunk is ready: just
 * after the first sentence end (a mark followed by whitespace, so "3.14" is not one; or a newline)
 * that leaves at least MIN_CHUNK characters; else, past MAX_CHUNK, at the last whitespace.
 */
export function sentenceCut(text: string): number {
  for (let i = MIN_CHUNK - 1; i < text.length - 1; i++) {
    const c = text[i]!;
    if (c === '\n' || (END.has(c) && /\s/.test(text[i + 1]!))) return i + 1;
  }
  if (text.length > MAX_CHUNK) {
    const space = text.slice(0, MAX_CHUNK).search(/\s\S*$/);
    return space > 0 ? space : MAX_CHUNK;
  }
  return 0;
}

// The sim's deterministic primitives: token pieces, FNV-1a hash, PRNG and the fixed vocabulary (precomputed pieces).
import { countTokens, isSpaceCode, isWordCode } from '../meter/tokens.js';

export { countTokens };

/** Splits text into pieces of exactly one token each (leading whitespace stays with the token that follows it). */
export function tokenPieces(text: string): string[] {
  const out: string[] = [];
  let start = 0;
  const len = text.length;
  let i = 0;
  while (i < len) {
    const c = text.charCodeAt(i);
    if (isSpaceCode(c)) { i++; continue; }
    let j = i + 1;
    if (isWordCode(c)) while (j < len && isWordCode(text.charCodeAt(j))) j++;
    else if (c >= 0xd800 && c <= 0xdbff && j < len) {
      const d = text.charCodeAt(j);
      if (d >= 0xdc00 && d <= 0xdfff) j++;
    }
    out.push(text.slice(start, j));
    start = i = j;
  }
  if (start < len) {
    if (out.length > 0) out[out.length - 1] += text.slice(start);
    else out.push(text.slice(start));
  }
  return out;
}

/** 32-bit FNV-1a over UTF-16 code units. */
export function fnv1a(s: string, h = 0x811c9dc5): number {
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 0x01000193); }
  return h >>> 0;
}

/** mulberry32: a small, fast, well-mixed PRNG returning floats in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function hex8(n: number): string {
  return (n >>> 0).toString(16).padStart(8, '0');
}

/** 215 plain English words, each a single token (ASCII letters only). */
export const VOCAB: readonly string[] = (
  'the a an and or but of to in on at by for with from into over under after before about ' +
  'gateway token meter ledger balance stream model request answer reply question quick bright river stone light ' +
  'blue green red small large early late north south east west signal packet route price value clear simple ' +
  'exact careful steady open close build test check count share hold settle bill key limit rate window engine ' +
  'cloud field paper garden market harbor forest valley summer winter morning evening story number letter sound ' +
  'voice water fire earth metal glass wood silver golden gentle rapid silent honest modern ancient patient curious ' +
  'house road bridge tower city village island mountain ocean desert meadow orchard lantern candle mirror ' +
  'table chair door roof wall floor kitchen library school office station wheel train ship plane ' +
  'bird fish horse tiger eagle whale rabbit fox bear wolf seed root leaf branch flower fruit bread cheese ' +
  'coffee tea honey salt sugar rice apple lemon orange grape music dance song poem novel chapter page word ' +
  'idea plan reason method result reader writer friend teacher doctor farmer sailor pilot artist builder ' +
  'quiet loud warm cold soft hard fast slow new old young deep wide narrow strong kind brave calm proud ' +
  'always often never today tomorrow here there together again'
).split(' ');

/** Punctuation the generator scatters between words; each mark is one token. */
export const PUNCT: readonly string[] = ['.', ',', ';', ':', '!', '?'];

/** Vocabulary words as streamed after the first: a leading space, then the word. */
export const SPACED: readonly string[] = VOCAB.map((w) => ` ${w}`);

/** JSON string literals for every piece the generator can produce (so framing a chunk is plain concatenation). */
const JSON_CACHE = new Map<string, string>();
for (const p of [...VOCAB, ...SPACED, ...PUNCT]) JSON_CACHE.set(p, JSON.stringify(p));

export function jsonString(s: string): string {
  return JSON_CACHE.get(s) ?? JSON.stringify(s);
}

// An OpenAI-compatible verbose_json transcription in the family's SpeechToTextChunkResponseModel shape (A6): words and the spacing between them, with times.

type Obj = Record<string, unknown>;
export type Granularity = 'none' | 'word' | 'character';

/** OpenAI-compatible hosts name the language ("english"); the family gives ISO 639-3 codes. */
const ISO3: Record<string, string> = {
  english: 'eng', en: 'eng', german: 'deu', de: 'deu', french: 'fra', fr: 'fra', spanish: 'spa', es: 'spa', italian: 'ita', it: 'ita',
  portuguese: 'por', pt: 'por', dutch: 'nld', nl: 'nld', polish: 'pol', pl: 'pol', japanese: 'jpn', ja: 'jpn', chinese: 'zho', zh: 'zho',
  korean: 'kor', ko: 'kor', russian: 'rus', ru: 'rus', hindi: 'hin', hi: 'hin', arabic: 'ara', ar: 'ara', turkish: 'tur', tr: 'tur',
};

interface Timed { text: string; start: number; end: number }

function num(v: unknown): number | null { return typeof v === 'number' && Number.isFinite(v) ? v : null; }
function ms(x: number): number { return Math.round(x * 1000) / 1000; }

/** Words spread evenly over [start, end] (a segment's, or the whole audio's). */
function spread(text: string, start: number, end: number): Timed[] {
  const plain = text.split(/\s+/).filter(Boolean);
  const step = plain.length ? (end - start) / plain.length : 0;
  return plain.map((t, i) => ({ text: t, start: start + i * step, end: start + (i + 1) * step }));
}

/**
 * The upstream's word times; without them (faster-whisper-server answers segments only), each segment's words
 * spread evenly over the segment's time (within the measured duration); without segments either, the text's words over the measured duration.
 */
function timedWords(json: Obj, text: string, durationSecs: number): Timed[] {
  const words = Array.isArray(json.words) ? (json.words as Obj[]) : [];
  const timed = words.flatMap((w) => {
    const t = typeof w.word === 'string' ? w.word.trim() : typeof w.text === 'string' ? w.text.trim() : '';
    const start = num(w.start);
    const end = num(w.end);
    return t && start !== null && end !== null ? [{ text: t, start, end }] : [];
  });
  if (timed.length > 0) return timed;
  const segments = Array.isArray(json.segments) ? (json.segments as Obj[]) : [];
  const bySegment = segments.flatMap((sg) => {
    const start = num(sg?.start);
    const end = num(sg?.end);
    if (typeof sg?.text !== 'string' || start === null || end === null) return [];
    // Whisper's segment times are cut at 20 ms steps and can run past the audio: no word ends after the audio does.
    const to = Math.min(Math.max(start, end), durationSecs);
    return spread(sg.text, Math.min(start, to), to);
  });
  if (bySegment.length > 0) return bySegment;
  return spread(text, 0, durationSecs);
}

function characters(w: Timed): Obj[] {
  const chars = [...w.text];
  const step = (w.end - w.start) / chars.length;
  return chars.map((c, i) => ({ text: c, start: ms(w.start + i * step), end: ms(w.start + (i + 1) * step) }));
}

export function chunkResponse(json: Obj, o: { durationSecs: number; granularity: Granularity; languageCode: string | null }): Obj {
  const text = typeof json.text === 'string' ? json.text.trim() : '';
  const lang = o.languageCode ?? (typeof json.language === 'string' ? json.language.toLowerCase() : '');
  const words: Obj[] = [];
  const timed = timedWords(json, text, o.durationSecs);
  timed.forEach((w, i) => {
    if (i > 0) {
      const prev = timed[i - 1]!;
      words.push(time({ text: ' ', type: 'spacing', logprob: 0 }, prev.end, w.start, o.granularity));
    }
    const word = time({ text: w.text, type: 'word', logprob: 0 }, w.start, w.end, o.granularity);
    if (o.granularity === 'character') word.characters = characters(w);
    words.push(word);
  });
  // The contract reports no language confidence or word probabilities: a given language is certain, and logprob 0 claims nothing more.
  return { language_code: ISO3[lang] ?? (lang || 'und'), language_probability: 1, text, words };
}

function time(w: Obj, start: number, end: number, g: Granularity): Obj {
  return g === 'none' ? { ...w, start: null, end: null } : { ...w, start: ms(start), end: ms(Math.max(start, end)) };
}

// OpenAI's transcription response formats made from an upstream's verbose_json (or json) reply, for an upstream that lacks them.
import type { TranscriptFormat } from '../../config-transcription.js';

type Obj = Record<string, unknown>;
interface Cue { start: number; end: number; text: string }

export const FORMAT_TYPES: Record<TranscriptFormat, string> = {
  json: 'application/json', verbose_json: 'application/json',
  text: 'text/plain; charset=utf-8', srt: 'text/plain; charset=utf-8', vtt: 'text/vtt; charset=utf-8',
};

function num(v: unknown): number | null { return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : null; }

export function transcriptText(json: Obj): string {
  return typeof json.text === 'string' ? json.text : '';
}

/**
 * A subtitle timestamp as Whisper's writers (and so OpenAI) print it: hours always, milliseconds rounded,
 * `,` before them in SubRip and `.` in WebVTT: `00:00:01,000` / `00:00:01.000`.
 */
export function clock(secs: number, sep: ',' | '.'): string {
  const ms = Math.round(secs * 1000);
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${p(Math.floor(ms / 3_600_000))}:${p(Math.floor(ms / 60_000) % 60)}:${p(Math.floor(ms / 1000) % 60)}${sep}${p(ms % 1000, 3)}`;
}

/** The reply's segments as cues; a reply without segments is one cue over the whole audio. */
function cues(json: Obj, durationSecs: number): Cue[] {
  const segs = Array.isArray(json.segments) ? (json.segments as Obj[]) : [];
  const out = segs.flatMap((s) => {
    const start = num(s?.start);
    const end = num(s?.end);
    const text = typeof s?.text === 'string' ? cueText(s.text) : '';
    return start !== null && end !== null && text !== '' ? [{ start, end: Math.max(start, end), text }] : [];
  });
  if (out.length > 0) return out;
  const text = cueText(transcriptText(json));
  return text === '' ? [] : [{ start: 0, end: num(json.duration) ?? durationSecs, text }];
}

/** A cue's text as Whisper writes it: trimmed, and never holding the `-->` that would end its timing line. */
function cueText(t: string): string {
  return t.trim().replace(/-->/g, '->');
}

/** SubRip: numbered cues from 1, each followed by a blank line. */
export function srt(json: Obj, durationSecs: number): string {
  return cues(json, durationSecs).map((c, i) => `${i + 1}\n${clock(c.start, ',')} --> ${clock(c.end, ',')}\n${c.text}\n\n`).join('');
}

/** WebVTT: the header, then unnumbered cues, each followed by a blank line. */
export function vtt(json: Obj, durationSecs: number): string {
  return `WEBVTT\n\n${cues(json, durationSecs).map((c) => `${clock(c.start, '.')} --> ${clock(c.end, '.')}\n${c.text}\n\n`).join('')}`;
}

/** `format` made from a verbose_json (or, for json and text, a json) reply. */
export function renderTranscript(json: Obj, format: TranscriptFormat, durationSecs: number): string {
  switch (format) {
    case 'text': return `${transcriptText(json).trim()}\n`;
    case 'srt': return srt(json, durationSecs);
    case 'vtt': return vtt(json, durationSecs);
    case 'json': {
      const out: Obj = { text: transcriptText(json) };
      if (json.usage && typeof json.usage === 'object') out.usage = json.usage;
      return JSON.stringify(out);
    }
    default: return JSON.stringify(json);
  }
}

/**
 * The stream a client asked for (`stream=true`), made from an upstream's whole reply when the upstream does not
 * stream: `transcript.text.delta` events, one a word with the space before it (they join to the text), then
 * `transcript.text.done` with the whole text.
 */
export function transcriptEvents(json: Obj): string {
  const text = transcriptText(json).trim();
  const pieces = text.match(/\s*\S+/g) ?? [];
  const events = pieces.map((delta) => `data: ${JSON.stringify({ type: 'transcript.text.delta', delta })}\n\n`);
  events.push(`data: ${JSON.stringify({ type: 'transcript.text.done', text })}\n\n`);
  return events.join('');
}

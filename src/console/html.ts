// The html`` tagged template: every interpolation is escaped unless it is already Html (or marked safe()).

/** Markup that is known to be safe: produced by html`` itself or explicitly marked with safe(). */
export class Html {
  constructor(readonly value: string) {}
  toString(): string { return this.value; }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"'`]/g, (c) => ESCAPES[c]!);
}

/** Marks a string as markup: only for constants and for output of trusted renderers (the SVG chart). */
export function safe(markup: string): Html {
  return new Html(markup);
}

type Value = Html | string | number | bigint | boolean | null | undefined | readonly Value[];

function render(v: Value): string {
  if (v === null || v === undefined || v === false) return '';
  if (v instanceof Html) return v.value;
  if (Array.isArray(v)) return v.map((x: Value) => render(x)).join('');
  return escapeHtml(String(v));
}

export function html(strings: TemplateStringsArray, ...values: Value[]): Html {
  let out = strings[0] ?? '';
  for (let i = 0; i < values.length; i++) out += render(values[i]) + (strings[i + 1] ?? '');
  return new Html(out);
}

/** `true` renders the bare attribute name (checked, selected, disabled); anything else renders nothing. */
export function attr(name: 'checked' | 'selected' | 'disabled' | 'required', on: boolean): Html {
  return new Html(on ? ` ${name}` : '');
}

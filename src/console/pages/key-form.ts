// The key form (create and edit): its fields, rendering with the values entered, and parsing into limits.
import { SCOPES, type Period, type Scope } from '../../store/keys.js';
import { dollarsToNano, nanoToDecimal, type Nanodollars } from '../../money.js';
import { attr, html, type Html } from '../html.js';

export interface KeyFields {
  label: string; scopes: string[]; spendLimit: string; period: string; rpm: string; concurrency: string;
  /** Per-minute usage limits: tokens (text), characters (speech), audio seconds (transcription); empty is none. */
  tpm: string; charsPerMin: string; audioSecsPerMin: string;
  /** Opted in to model fallback (a checkbox). */
  fallback: boolean;
}

export interface KeyInput {
  label: string;
  scopes: Scope[];
  spendLimit: Nanodollars | null;
  period: Period;
  rpm: number | null;
  concurrency: number | null;
  tpm: number | null;
  charsPerMin: number | null;
  audioSecsPerMin: number | null;
  fallback: boolean;
}

const SCOPE_HELP: Record<Scope, string> = { llm: 'text and embeddings', voice: 'speech', batch: 'batch jobs' };
const MAX_RPM = 1_000_000;
const MAX_CONCURRENCY = 100_000;
/** The database column is a 32-bit integer. */
const MAX_USAGE = 2_000_000_000;

export const EMPTY_FIELDS: KeyFields = { label: '', scopes: [...SCOPES], spendLimit: '', period: 'monthly', rpm: '', concurrency: '', tpm: '', charsPerMin: '', audioSecsPerMin: '', fallback: false };

export function fieldsFromForm(f: URLSearchParams): KeyFields {
  return {
    label: (f.get('label') ?? '').trim(), scopes: f.getAll('scopes'), spendLimit: (f.get('spend_limit') ?? '').trim(),
    period: f.get('period') ?? 'monthly', rpm: (f.get('rpm') ?? '').trim(), concurrency: (f.get('concurrency') ?? '').trim(),
    tpm: (f.get('tpm') ?? '').trim(), charsPerMin: (f.get('chars_per_min') ?? '').trim(), audioSecsPerMin: (f.get('audio_secs_per_min') ?? '').trim(),
    fallback: f.get('fallback') === 'on',
  };
}

export function fieldsFromKey(k: { label: string; scopes: Scope[]; spendLimit: bigint | null; spendLimitPeriod: Period | null; rpmLimit: number | null; concurrencyLimit: number | null;
  tpmLimit: number | null; charsPerMinLimit: number | null; audioSecsPerMinLimit: number | null; fallback: boolean }): KeyFields {
  return {
    label: k.label, scopes: k.scopes, spendLimit: k.spendLimit === null ? '' : nanoToDecimal(k.spendLimit),
    period: k.spendLimitPeriod ?? 'monthly', rpm: k.rpmLimit?.toString() ?? '', concurrency: k.concurrencyLimit?.toString() ?? '',
    tpm: k.tpmLimit?.toString() ?? '', charsPerMin: k.charsPerMinLimit?.toString() ?? '', audioSecsPerMin: k.audioSecsPerMinLimit?.toString() ?? '',
    fallback: k.fallback,
  };
}

function optionalInt(text: string, name: string, max: number, empty = 'the default'): number | null {
  if (text === '') return null;
  if (!/^\d+$/.test(text) || Number(text) < 1 || Number(text) > max) throw new RangeError(`${name} must be a whole number from 1 to ${max.toLocaleString('en-US')}, or empty for ${empty}.`);
  return Number(text);
}

/** Parses the fields, or throws a RangeError whose message names the field for the person filling it in. */
export function parseKeyFields(v: KeyFields, withScopes: boolean): KeyInput {
  if (v.label.length > 100) throw new RangeError('The label can be at most 100 characters.');
  const scopes = [...new Set(v.scopes)];
  if (withScopes) {
    for (const sc of scopes) if (!SCOPES.includes(sc as Scope)) throw new RangeError(`Unknown scope "${sc}".`);
    if (scopes.length === 0) throw new RangeError('Pick at least one scope.');
  }
  let spendLimit: Nanodollars | null = null;
  if (v.spendLimit !== '') {
    const text = v.spendLimit.replace(/^\$/, '').replace(/,/g, '');
    try { spendLimit = dollarsToNano(text); } catch { throw new RangeError('The spend ceiling must be a dollar amount such as 25 or 2.50.'); }
    if (spendLimit < 0n || spendLimit > 1_000_000_000n * 1_000_000_000n) throw new RangeError('The spend ceiling must be between $0 and $1,000,000,000.');
  }
  if (v.period !== 'daily' && v.period !== 'monthly') throw new RangeError('The ceiling period must be daily or monthly.');
  return {
    label: v.label, scopes: scopes as Scope[], spendLimit, period: v.period,
    rpm: optionalInt(v.rpm, 'Requests per minute', MAX_RPM), concurrency: optionalInt(v.concurrency, 'Concurrent requests', MAX_CONCURRENCY),
    tpm: optionalInt(v.tpm, 'Tokens per minute', MAX_USAGE, 'no limit'), charsPerMin: optionalInt(v.charsPerMin, 'Characters per minute', MAX_USAGE, 'no limit'),
    audioSecsPerMin: optionalInt(v.audioSecsPerMin, 'Audio seconds per minute', MAX_USAGE, 'no limit'), fallback: v.fallback,
  };
}

export function keyFormFields(v: KeyFields, defaults: { rpm: number; concurrency: number }, opts: { scopes: boolean }): Html {
  const scopes = opts.scopes ? html`<div class="field"><label>Scopes</label><div class="checks">${SCOPES.map((sc) =>
    html`<label><input type="checkbox" name="scopes" value="${sc}"${attr('checked', v.scopes.includes(sc))}> ${sc} <span class="faint">(${SCOPE_HELP[sc]})</span></label>`)}</div></div>` : '';
  return html`<div class="field"><label for="label">Label</label><input id="label" name="label" type="text" maxlength="100" value="${v.label}" placeholder="e.g. production backend"></div>
${scopes}
<div class="row"><div class="field"><label for="spend_limit">Spend ceiling (USD)</label><input id="spend_limit" name="spend_limit" type="text" inputmode="decimal" value="${v.spendLimit}" placeholder="none"></div>
<div class="field"><label for="period">Ceiling period</label><select id="period" name="period">
<option value="monthly"${attr('selected', v.period !== 'daily')}>per month (UTC)</option><option value="daily"${attr('selected', v.period === 'daily')}>per day (UTC)</option></select></div>
<div class="field"><label for="rpm">Requests per minute</label><input id="rpm" name="rpm" type="text" inputmode="numeric" value="${v.rpm}" placeholder="default (${defaults.rpm})"></div>
<div class="field"><label for="concurrency">Concurrent requests</label><input id="concurrency" name="concurrency" type="text" inputmode="numeric" value="${v.concurrency}" placeholder="default (${defaults.concurrency})"></div></div>
<div class="row"><div class="field"><label for="tpm">Tokens per minute</label><input id="tpm" name="tpm" type="text" inputmode="numeric" value="${v.tpm}" placeholder="no limit"></div>
<div class="field"><label for="chars_per_min">Characters per minute (speech)</label><input id="chars_per_min" name="chars_per_min" type="text" inputmode="numeric" value="${v.charsPerMin}" placeholder="no limit"></div>
<div class="field"><label for="audio_secs_per_min">Audio seconds per minute (transcription)</label><input id="audio_secs_per_min" name="audio_secs_per_min" type="text" inputmode="numeric" value="${v.audioSecsPerMin}" placeholder="no limit"></div></div>
<div class="field"><div class="checks"><label><input type="checkbox" name="fallback"${attr('checked', v.fallback)}> Model fallback <span class="faint">(when a model's servers cannot take a request, it may be answered by another model the operator lists for it, billed at that model's prices; the reply names it)</span></label></div></div>
<p class="hint form-hint">With a ceiling, requests are refused once the key has spent that much in the period. Empty rate fields use the defaults; empty usage limits mean none.</p>`;
}

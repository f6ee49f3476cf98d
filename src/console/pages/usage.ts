// Usage: daily spend over the last 30 days by key and by product (inline SVG), and the latest billed requests.
import { keysOfAccount } from '../../store/keys.js';
import { html, type Html } from '../html.js';
import { count, usd, utc } from '../format.js';
import { legend, stackedBars, topSeries, type Series } from '../chart.js';
import { dailySpend, latestEntries, type DailySpend, type LedgerRow } from '../../store/console.js';
import { show, type Req } from '../page.js';

const DAYS = 30;
const RECENT = 50;

function lastDays(now: Date): string[] {
  const end = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  return Array.from({ length: DAYS }, (_, i) => new Date(end - (DAYS - 1 - i) * 86_400_000).toISOString().slice(0, 10));
}

function seriesBy(rows: DailySpend[], days: string[], name: (r: DailySpend) => string): Series[] {
  const index = new Map(days.map((d, i) => [d, i]));
  const out = new Map<string, Series>();
  for (const r of rows) {
    const i = index.get(r.day);
    if (i === undefined) continue;
    const n = name(r);
    let s = out.get(n);
    if (!s) out.set(n, s = { name: n, values: new Array<bigint>(days.length).fill(0n) });
    s.values[i]! += r.spent;
  }
  return topSeries([...out.values()], days.length);
}

/** Seconds of audio as the ledger holds them (milliseconds exact): "2.58 s", or past a minute "1 min 2.5 s". */
function seconds(v: number): string {
  const ms = Math.round(v * 1000);
  const min = Math.floor(ms / 60_000);
  const rest = `${Number(((ms % 60_000) / 1000).toFixed(3))} s`;
  return min > 0 ? `${min} min ${rest}` : rest;
}

/** Every unit the debit was priced by, each named: tokens, characters spoken, audio in and out. */
export function units(e: LedgerRow): Html {
  const parts: string[] = [];
  if (e.inputTokens || e.outputTokens) parts.push(`${count(e.inputTokens ?? 0)} in · ${count(e.outputTokens ?? 0)} out`);
  if (e.cachedInputTokens) parts.push(`${count(e.cachedInputTokens)} cached in`);
  if (e.audioInputTokens || e.audioOutputTokens) parts.push(`${count(e.audioInputTokens ?? 0)} audio tokens in · ${count(e.audioOutputTokens ?? 0)} out`);
  if (e.characters) parts.push(`${count(e.characters)} chars`);
  if (e.audioSecondsIn) parts.push(`${seconds(e.audioSecondsIn)} audio in`);
  if (e.audioSecondsOut) parts.push(`${seconds(e.audioSecondsOut)} audio out`);
  if (parts.length === 0) return html`<span class="faint">—</span>`;
  return html`${parts.join(' · ')}`;
}

/**
 * The product a ledger reason (its route) belongs to, so the chart shows a handful of products (never
 * folding chat or batch into "other"): batch lines, chat (chat completions, completions, responses),
 * embeddings, speech, transcription, voice changer, realtime.
 */
export function productOf(reason: string): string {
  if (reason.startsWith('batch.')) return 'batch';
  if (reason === 'chat.completions' || reason === 'completions' || reason === 'responses') return 'chat';
  if (reason === 'audio.speech' || reason.startsWith('beta.tts')) return 'speech';
  if (reason === 'audio.transcriptions' || reason === 'audio.translations' || reason === 'beta.stt') return 'transcription';
  if (reason.startsWith('beta.sts')) return 'voice changer';
  if (reason === 'realtime' || reason.startsWith('realtime.')) return 'realtime';
  return reason;
}

function recentTable(rows: LedgerRow[]): Html {
  if (rows.length === 0) return html`<div class="empty">No billed requests yet. Requests appear here as soon as they are settled.</div>`;
  return html`<div class="scroll-x"><table id="recent"><thead><tr><th>Time</th><th>Key</th><th>Product</th><th>Model</th><th class="num">Units</th><th class="num">Cost</th></tr></thead><tbody>
${rows.map((e) => html`<tr><td class="small">${utc(e.at, true)}</td><td>${e.keyPrefix ? html`<code>${e.keyPrefix}…</code>` : html`<span class="faint">—</span>`}</td>
<td>${e.reason}</td><td>${e.model ?? '—'}</td><td class="num small">${units(e)}</td><td class="num">${usd(-e.amount)}</td></tr>`)}</tbody></table></div>`;
}

function chartCard(id: string, title: string, days: string[], series: Series[]): Html {
  return html`<div class="card flush" id="${id}"><div class="card-head"><h2>${title}</h2><span class="muted small">last ${DAYS} days, UTC</span></div>
<div class="chart-wrap">${stackedBars(title, days, series)}</div>${series.length ? legend(series) : ''}</div>`;
}

export async function usagePage(r: Req): Promise<void> {
  const accountId = r.session.user.accountId;
  const days = lastDays(new Date());
  const since = new Date(`${days[0]}T00:00:00Z`);
  const [rows, recent, keys] = await Promise.all([
    dailySpend(r.s.db, accountId, since), latestEntries(r.s.db, accountId, RECENT, 'debit'), keysOfAccount(r.s.db, accountId),
  ]);
  const labels = new Map(keys.map((k) => [k.prefix, k.label]));
  const byKey = seriesBy(rows, days, (x) => {
    if (!x.keyPrefix) return 'no key';
    const label = labels.get(x.keyPrefix);
    return label ? `${x.keyPrefix}… (${label})` : `${x.keyPrefix}…`;
  });
  const byProduct = seriesBy(rows, days, (x) => productOf(x.product));
  const total = rows.reduce((a, x) => a + x.spent, 0n);
  const today = rows.filter((x) => x.day === days[days.length - 1]).reduce((a, x) => a + x.spent, 0n);
  const requests = rows.reduce((a, x) => a + x.requests, 0);
  const body = html`<div class="head"><div><h1>Usage</h1><p class="muted">What your keys spent, per day, from the ledger.</p></div></div>
<div class="grid g3"><div class="card"><div class="muted small">Spend, last ${DAYS} days</div><div class="stat">${usd(total)}</div></div>
<div class="card"><div class="muted small">Spend today (UTC)</div><div class="stat">${usd(today)}</div></div>
<div class="card"><div class="muted small">Billed requests, last ${DAYS} days</div><div class="stat">${count(requests)}</div></div></div>
${chartCard('by-key', 'Daily spend by key', days, byKey)}
${chartCard('by-product', 'Daily spend by product', days, byProduct)}
<div class="card flush"><div class="card-head"><h2>Recent requests</h2><a class="btn secondary sm" href="/console/billing/ledger.csv" download>Download CSV</a></div>${recentTable(recent)}</div>`;
  await show(r, 'Usage', 'usage', body);
}

// A server-rendered stacked bar chart (inline SVG) of daily spend; amounts stay bigint nanodollars until the pixel.
import { html, type Html } from './html.js';
import { usd } from './format.js';

export interface Series { name: string; values: bigint[] }

const W = 960;
const H = 240;
// The amounts are labelled on both sides: a phone shows the chart's newest (right) end first and scrolls to the rest.
const M = { left: 72, right: 72, top: 10, bottom: 26 };
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
export const MAX_SERIES = 8;

/** The smallest 1-2-5 step (in nanodollars) that covers `max` in at most four gridlines. */
function niceStep(max: bigint): bigint {
  const target = (max + 3n) / 4n;
  for (let mag = 1n; ; mag *= 10n) {
    for (const f of [1n, 2n, 5n]) if (f * mag >= target) return f * mag;
  }
}

function dayLabel(day: string): string {
  const [, m, d] = day.split('-');
  return `${MONTHS[Number(m) - 1] ?? ''} ${Number(d)}`;
}

/** Keeps the largest series and folds the rest into "other" so that colours stay distinguishable. */
export function topSeries(all: Series[], days: number): Series[] {
  const total = (s: Series) => s.values.reduce((a, b) => a + b, 0n);
  const sorted = [...all].sort((a, b) => (total(b) > total(a) ? 1 : total(b) < total(a) ? -1 : a.name.localeCompare(b.name)));
  if (sorted.length <= MAX_SERIES) return sorted;
  const other: Series = { name: 'other', values: new Array<bigint>(days).fill(0n) };
  for (const s of sorted.slice(MAX_SERIES - 1)) s.values.forEach((v, i) => { other.values[i]! += v; });
  return [...sorted.slice(0, MAX_SERIES - 1), other];
}

export function stackedBars(title: string, days: string[], series: Series[]): Html {
  const plotW = W - M.left - M.right;
  const plotH = H - M.top - M.bottom;
  const totals = days.map((_, i) => series.reduce((a, s) => a + (s.values[i] ?? 0n), 0n));
  const max = totals.reduce((a, b) => (b > a ? b : a), 0n);
  const step = max === 0n ? 1_000_000n : niceStep(max);
  const ticks = max === 0n ? 4 : Number((max + step - 1n) / step);
  const top = step * BigInt(ticks);
  // Scale in bigint first (parts per million of the axis) so tiny amounts do not vanish in float rounding.
  const y = (v: bigint) => M.top + plotH - (Number((v * 1_000_000n) / top) / 1_000_000) * plotH;
  const slot = plotW / days.length;
  const barW = Math.max(2, slot * 0.68);
  const grid = Array.from({ length: ticks + 1 }, (_, i) => {
    const v = step * BigInt(i);
    const yy = y(v).toFixed(1);
    return html`<line x1="${M.left}" x2="${W - M.right}" y1="${yy}" y2="${yy}"/><text x="${M.left - 8}" y="${yy}" dy="4" text-anchor="end">${usd(v)}</text><text x="${W - M.right + 8}" y="${yy}" dy="4" text-anchor="start">${usd(v)}</text>`;
  });
  const xLabels = days.map((d, i) => (i % 5 === (days.length - 1) % 5
    ? html`<text x="${(M.left + slot * i + slot / 2).toFixed(1)}" y="${H - 8}" text-anchor="middle">${dayLabel(d)}</text>` : ''));
  const bars = days.map((d, i) => {
    let base = 0n;
    const x = (M.left + slot * i + (slot - barW) / 2).toFixed(1);
    return series.map((s, si) => {
      const v = s.values[i] ?? 0n;
      if (v === 0n) return '';
      const y0 = y(base);
      base += v;
      const y1 = y(base);
      return html`<rect class="c${si}" x="${x}" y="${y1.toFixed(1)}" width="${barW.toFixed(1)}" height="${Math.max(1, y0 - y1).toFixed(1)}" rx="1.5"><title>${d} · ${s.name} · ${usd(v)}</title></rect>`;
    });
  });
  return html`<svg class="chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${title}" xmlns="http://www.w3.org/2000/svg">
<g class="grid axis">${grid}</g><g class="axis">${xLabels}</g><g class="bars">${bars}</g>
${max === 0n ? html`<text x="${M.left + plotW / 2}" y="${M.top + plotH / 2}" text-anchor="middle" class="empty-note">No spend in these 30 days</text>` : ''}</svg>`;
}

export function legend(series: Series[]): Html {
  return html`<div class="legend">${series.map((s, i) => html`<span><i class="c${i}"></i>${s.name} <b>${usd(s.values.reduce((a, b) => a + b, 0n))}</b></span>`)}</div>`;
}

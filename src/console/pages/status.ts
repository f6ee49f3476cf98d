// The status page a person reads (GET /status): the same components and figures as GET /svc/v1/status, in the console's look.
import type { Services } from '../../services.js';
import type { Ctx } from '../../server/context.js';
import { html, type Html } from '../html.js';
import { publicPage } from '../layout.js';
import { sendHtml } from '../http.js';
import type { Component, ComponentStatus } from '../../observe/status.js';
import type { WindowFigures } from '../../observe/availability.js';

const LABEL: Record<ComponentStatus, [string, string]> = {
  operational: ['Operational', 'ok'],
  degraded_performance: ['Degraded performance', 'warn'],
  partial_outage: ['Partial outage', 'off'],
  major_outage: ['Major outage', 'off'],
};

function percent(f: WindowFigures): string {
  if (f.availability === null) return '—';
  return `${(Math.floor(f.availability * 10000) / 100).toFixed(2)}%`;
}

function row(c: Component): Html {
  const [label, tone] = LABEL[c.status];
  // The status first, beside the name: on a phone the figures scroll, the status stays in view.
  return html`<tr data-component="${c.id}"><td><span class="tag ${tone}">${label}</span> <strong title="${c.description}">${c.name}</strong></td>
<td class="num">${percent(c.availability['5m'])}</td><td class="num">${percent(c.availability['30m'])}</td>
<td class="num">${percent(c.availability['1d'])}</td><td>${c.last_reviewed_at}</td></tr>`;
}

export function statusPage(s: Services, ctx: Ctx): void {
  const summary = s.statusBoard.summary() as { status: { indicator: string; description: string }; components: Component[]; page: { updated_at: string } };
  const rows = summary.components.filter((c) => !c.group);
  const tone = summary.status.indicator === 'none' ? 'ok' : summary.status.indicator === 'minor' ? 'warn' : 'err';
  const body = html`<div class="head"><h1>Status</h1></div>
<div class="notice ${tone}" role="status" data-indicator="${summary.status.indicator}">${summary.status.description}</div>
<div class="card flush"><div class="scroll-x"><table><thead><tr><th>Area</th><th class="num">5 min</th><th class="num">30 min</th><th class="num">24 h</th><th>Last reviewed</th></tr></thead>
<tbody>${rows.map(row)}</tbody></table></div></div>
<p class="muted">Availability is this instance's live traffic: successes over successes plus server-side failures (callers' 4xx and 429 are not counted); — means no traffic in that window.
Each instance reports its own traffic. Updated ${summary.page.updated_at}. The same as JSON: <a href="/svc/v1/status">/svc/v1/status</a>.</p>`;
  sendHtml(s, ctx, 200, publicPage('Status', body), { 'cache-control': 'no-store' });
}

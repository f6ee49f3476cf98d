// Balance and billing: top-up through Checkout, saving a card, auto top-up settings, the ledger and its CSV export.
import { getAutoTopup, payments, setAutoTopup } from '../../billing/index.js';
import { GatewayError } from '../../errors.js';
import { dollarsToNano, nanoToDecimal } from '../../money.js';
import { attr, html, type Html } from '../html.js';
import { csrfField, notice } from '../layout.js';
import { baseUrl } from '../http.js';
import { usd, utc } from '../format.js';
import { LEDGER_HEADER, ledgerCsvRow } from '../csv.js';
import { entriesAfter, latestEntries, type LedgerRow } from '../../store/console.js';
import { clearedCredits } from '../../store/ledger-reads.js';
import { seeOther, show, type Req } from '../page.js';

const MIN_TOPUP = 5n * 1_000_000_000n;
const MAX_TOPUP = 1000n * 1_000_000_000n;
const LEDGER_ROWS = 50;

const DONE: Record<string, string> = {
  'auto-topup': 'Automatic top-up settings saved.',
  card: 'Your card was saved for automatic top-ups.',
};

const SANDBOX_NOTE = 'Payments run in sandbox mode: top-ups add credit to the balance and no real money is taken.';

const STATUS_TEXT: Record<string, { tone: 'ok' | 'warn' | 'off'; text: string }> = {
  succeeded: { tone: 'ok', text: 'The last automatic top-up succeeded.' },
  processing: { tone: 'warn', text: 'A charge is being processed.' },
  authentication_required: { tone: 'off', text: 'Your bank asked to confirm the last charge. Save your card again to authorise automatic top-ups.' },
  card_declined: { tone: 'off', text: 'The last charge was declined. Save another card.' },
  failed: { tone: 'off', text: 'The last automatic top-up failed.' },
};

interface Form { topup?: string; topupError?: string; autoError?: string; auto?: { enabled: boolean; threshold: string; amount: string } }

/** Credits whose idempotency key names this Checkout session: the payment has cleared. */
async function clearedAmount(r: Req, sessionId: string): Promise<bigint | null> {
  return clearedCredits(r.s.db, r.session.user.accountId, sessionId);
}

function paidNotice(sessionId: string, cleared: bigint | null): Html {
  if (cleared !== null) return notice('ok', `Payment received: ${usd(cleared)} was added to your balance.`);
  return html`<div class="notice info" role="status" data-poll-session="${sessionId}">Thanks! Your balance goes up as soon as the payment clears; this page updates by itself.</div>`;
}

export function ledgerTable(rows: LedgerRow[]): Html {
  if (rows.length === 0) return html`<div class="empty">No ledger entries yet.</div>`;
  return html`<div class="scroll-x"><table><thead><tr><th>Time</th><th>Kind</th><th class="num">Amount</th><th>Reason</th><th>Model</th><th>Key</th></tr></thead><tbody>
${rows.map((e) => html`<tr><td class="small">${utc(e.at, true)}</td><td><span class="tag ${e.kind === 'credit' ? 'ok' : ''}">${e.kind}</span></td>
<td class="num">${usd(e.amount, { plus: true })}</td><td>${e.reason}</td><td>${e.model ?? html`<span class="faint">—</span>`}</td>
<td>${e.keyPrefix ? html`<code>${e.keyPrefix}…</code>` : html`<span class="faint">—</span>`}</td></tr>`)}</tbody></table></div>`;
}

async function billingPage(r: Req, f: Form = {}, status = 200): Promise<void> {
  const accountId = r.session.user.accountId;
  const [balance, auto, entries] = await Promise.all([
    r.s.cache.balanceOf(accountId), getAutoTopup(r.s, accountId), latestEntries(r.s.db, accountId, LEDGER_ROWS),
  ]);
  const paid = r.query.get('paid');
  const sessionNote = paid && /^[A-Za-z0-9_-]{1,200}$/.test(paid) ? paidNotice(paid, await clearedAmount(r, paid)) : html``;
  const a = f.auto ?? { enabled: auto.enabled, threshold: auto.threshold ? nanoToDecimal(dollarsToNano(auto.threshold)) : '10', amount: auto.amount ? nanoToDecimal(dollarsToNano(auto.amount)) : '25' };
  const st = auto.status ? STATUS_TEXT[auto.status] ?? { tone: 'warn' as const, text: auto.status.replace(/_/g, ' ') } : null;
  const body = html`<div class="head"><div><h1>Billing</h1><p class="muted">Tollgate is prepaid: requests draw on this balance and are refused once it runs out.</p></div></div>
${r.s.config.payments.provider === 'sandbox' ? notice('warn', SANDBOX_NOTE) : ''}${sessionNote}${notice('ok', DONE[r.query.get('done') ?? ''])}
<div class="grid g2">
<div class="card"><h2>Balance</h2><div class="stat" id="balance" data-balance>${usd(balance)}</div>
<p class="muted small">Account <code id="account-id">${accountId}</code></p>
${auto.enabled ? html`<p class="small">Auto top-up adds ${usd(dollarsToNano(auto.amount))} when the balance falls below ${usd(dollarsToNano(auto.threshold))}.</p>` : ''}</div>
<div class="card"><h2>Add funds</h2>${notice('err', f.topupError)}
<form method="post" action="/console/billing/topup">${csrfField(r.session.csrf)}
<div class="row"><div class="field"><label for="amount">Amount (USD)</label><input id="amount" name="amount" type="number" min="5" max="1000" step="0.01" required value="${f.topup ?? '25'}">
<div class="hint">From $5 to $1,000. You pay on a secure checkout page.</div></div>
<div class="field shrink"><button type="submit">Continue to payment</button><div class="hint">&nbsp;</div></div></div></form></div>
</div>
<div class="card" id="auto-topup"><h2>Automatic top-up</h2>
<p class="muted">Charge your saved card when the balance runs low, so requests never stop for lack of funds.</p>
<div class="grid g2"><div><dl class="kv"><dt>Card</dt><dd id="card">${auto.card ? html`<code>${auto.card}</code>` : html`<span class="faint">no card saved</span>`}</dd>
<dt>Status</dt><dd>${st ? html`<span class="tag ${st.tone}" id="auto-status" data-status="${auto.status}">${auto.status}</span><div class="small muted">${st.text}</div>` : html`<span class="faint">no automatic charges yet</span>`}</dd></dl>
<form method="post" action="/console/billing/card" class="spaced">${csrfField(r.session.csrf)}<button type="submit" class="secondary">${auto.card ? 'Replace card' : 'Save a card'}</button></form></div>
<div>${notice('err', f.autoError)}<form method="post" action="/console/billing/auto-topup">${csrfField(r.session.csrf)}
<div class="field checks"><label><input type="checkbox" name="enabled" value="on"${attr('checked', a.enabled)}> Top up automatically</label></div>
<div class="row"><div class="field"><label for="threshold">When the balance falls below (USD)</label><input id="threshold" name="threshold" type="text" inputmode="decimal" value="${a.threshold}"></div>
<div class="field"><label for="auto-amount">Add (USD)</label><input id="auto-amount" name="amount" type="text" inputmode="decimal" value="${a.amount}"></div></div>
<button type="submit">Save settings</button></form></div></div></div>
<div class="card flush"><div class="card-head"><h2>Ledger</h2><a class="btn secondary sm" href="/console/billing/ledger.csv" download>Download CSV</a></div>
${ledgerTable(entries)}${entries.length === LEDGER_ROWS ? html`<p class="foot pad">The latest ${LEDGER_ROWS} entries; the CSV has all of them.</p>` : ''}</div>`;
  await show(r, 'Billing', 'billing', body, status);
}

export async function billingHome(r: Req): Promise<void> {
  await billingPage(r);
}

export async function topUp(r: Req): Promise<void> {
  const text = (r.form!.get('amount') ?? '').trim().replace(/^\$/, '');
  const amount = /^\d{1,4}(\.\d{1,2})?$/.test(text) ? dollarsToNano(text) : null;
  if (amount === null || amount < MIN_TOPUP || amount > MAX_TOPUP) {
    return billingPage(r, { topup: text, topupError: 'Enter an amount from $5 to $1,000 (at most two decimals).' }, 422);
  }
  const session = await payments(r.s).checkout(r.session.user.accountId, amount, undefined, baseUrl(r.s, r.ctx));
  seeOther(r, session.url);
}

export async function saveCard(r: Req): Promise<void> {
  const session = await payments(r.s).setupCard(r.session.user.accountId, undefined, baseUrl(r.s, r.ctx));
  seeOther(r, session.url);
}

export async function saveAutoTopup(r: Req): Promise<void> {
  const f = r.form!;
  const auto = { enabled: f.get('enabled') === 'on', threshold: (f.get('threshold') ?? '').trim(), amount: (f.get('amount') ?? '').trim() };
  try {
    await setAutoTopup(r.s, r.session.user.accountId, auto);
  } catch (e) {
    if (e instanceof GatewayError && e.status === 422) return billingPage(r, { auto, autoError: e.message }, 422);
    throw e;
  }
  seeOther(r, '/console/billing?done=auto-topup');
}

/** For the page's script after a checkout: the balance now, and whether that session's credit is in. */
export async function balanceJson(r: Req): Promise<void> {
  const balance = await r.s.cache.balanceOf(r.session.user.accountId);
  const sessionId = r.query.get('session');
  const cleared = sessionId && /^[A-Za-z0-9_-]{1,200}$/.test(sessionId) ? await clearedAmount(r, sessionId) : null;
  r.ctx.json(200, { balance: usd(balance), cleared: cleared === null ? null : usd(cleared) }, { 'cache-control': 'no-store' });
}

/** All entries, oldest first, streamed a page at a time. */
export async function ledgerCsv(r: Req): Promise<void> {
  const { ctx, s } = r;
  ctx.begin(200, {
    'content-type': 'text/csv; charset=utf-8', 'content-disposition': 'attachment; filename="tollgate-ledger.csv"',
    'cache-control': 'no-store', 'x-content-type-options': 'nosniff',
  });
  await ctx.write(LEDGER_HEADER);
  let after = 0n;
  for (;;) {
    if (!ctx.live) return;
    const page = await entriesAfter(s.db, r.session.user.accountId, after, 2000);
    if (page.length === 0) break;
    await ctx.write(page.map(ledgerCsvRow).join(''));
    after = page[page.length - 1]!.id;
  }
  ctx.end();
}

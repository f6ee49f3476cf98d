// The sandbox's hosted checkout page: amount, a card form prefilled with a test card, and an unmissable no-charge banner.
import { randomBytes } from 'node:crypto';
import type { SessionRow } from './store.js';
import { SANDBOX_PATH, TEST_CARD } from './sandbox.js';

export interface Page { status: number; body: string; headers: Record<string, string> }

const ESC: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function esc(v: string): string {
  return v.replace(/[&<>"']/g, (c) => ESC[c]!);
}

/** "$1,234.50" from nanodollars that are whole cents. */
export function usd(nano: bigint): string {
  const cents = nano / 10_000_000n;
  return `$${(cents / 100n).toLocaleString('en-US')}.${(cents % 100n).toString().padStart(2, '0')}`;
}

/** Where the browser goes after paying; the placeholder Stripe fills in is filled in here too. */
export function successLocation(s: SessionRow): string {
  return s.successUrl.replaceAll('{CHECKOUT_SESSION_ID}', s.id);
}

function origin(url: string): string | null {
  try { return new URL(url).origin; } catch { return null; }
}

/** Inline style by nonce only; the form may post here and be redirected to the success page's origin. */
function headers(nonce: string, s: SessionRow | null): Record<string, string> {
  const targets = new Set(["'self'"]);
  const o = s ? origin(s.successUrl.replaceAll('{CHECKOUT_SESSION_ID}', 'x')) : null;
  if (o) targets.add(o);
  return {
    'content-security-policy': `default-src 'none'; style-src 'nonce-${nonce}'; img-src data:; form-action ${[...targets].join(' ')}; frame-ancestors 'none'; base-uri 'none'`,
    'x-frame-options': 'DENY', 'x-content-type-options': 'nosniff', 'referrer-policy': 'no-referrer', 'cache-control': 'no-store',
  };
}

const STYLE = `
*{box-sizing:border-box}body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1f36;background:#f6f8fb}
.banner{background:#ffb020;color:#3b2300;text-align:center;font-weight:600;padding:10px 16px;letter-spacing:.01em}
.wrap{max-width:920px;margin:0 auto;padding:48px 24px;display:grid;grid-template-columns:1fr 1fr;gap:48px}
@media(max-width:760px){.wrap{grid-template-columns:1fr;gap:24px;padding:24px 16px}}
.merchant{color:#697386;font-weight:600}.what{margin:24px 0 4px;color:#697386}.amount{font-size:36px;font-weight:700;margin:0}
.line{display:flex;justify-content:space-between;border-top:1px solid #e3e8ee;margin-top:24px;padding-top:12px;color:#3c4257}
.card{background:#fff;border-radius:12px;box-shadow:0 2px 5px rgba(60,66,87,.08),0 0 0 1px rgba(60,66,87,.06);padding:28px}
h1{font-size:18px;margin:0 0 16px}label{display:block;font-size:13px;font-weight:600;color:#3c4257;margin:14px 0 6px}
input{width:100%;font:inherit;padding:10px 12px;border:1px solid #cfd7df;border-radius:6px;background:#fff;color:#1a1f36}
input:focus{outline:2px solid #635bff33;border-color:#635bff}.row{display:grid;grid-template-columns:1fr 1fr;gap:12px}
button{margin-top:22px;width:100%;font:inherit;font-weight:600;font-size:16px;padding:12px;border:0;border-radius:6px;background:#635bff;color:#fff;cursor:pointer}
button:hover{background:#5046e4}.hint{font-size:12px;color:#697386;margin-top:14px}.err{background:#fde8e8;color:#8a1c1c;border-radius:6px;padding:10px 12px;margin-bottom:8px}
a{color:#635bff}.cancel{display:inline-block;margin-top:16px;font-size:14px}code{font-size:12px;white-space:nowrap}`;

/** The checkout (payment) or card-saving (setup) page for one session. */
export function checkoutPage(s: SessionRow, error: string | null = null, status = 200): Page {
  const nonce = randomBytes(16).toString('base64');
  const paying = s.mode === 'payment';
  const done = s.status === 'paid' || s.status === 'complete';
  const action = `${SANDBOX_PATH}/${encodeURIComponent(s.id)}`;
  const summary = paying
    ? `<p class="what">Add to your prepaid balance</p><p class="amount" id="amount">${esc(usd(s.amount!))}</p>
<div class="line"><span>Tollgate prepaid credit × 1</span><span>${esc(usd(s.amount!))}</span></div>
<div class="line"><strong>Total due</strong><strong>${esc(usd(s.amount!))}</strong></div>`
    : `<p class="what">Save a card for automatic top-ups</p><p class="amount">No charge today</p>
<div class="line"><span>Future top-ups are charged to this card when your balance runs low.</span></div>`;
  const form = done
    ? `<h1>${paying ? 'This checkout is paid' : 'This card is saved'}</h1><p>Nothing more to do here.</p><a href="${esc(successLocation(s))}">Continue</a>`
    : `<h1>${paying ? 'Pay with card' : 'Card details'}</h1>${error ? `<div class="err" role="alert">${esc(error)}</div>` : ''}
<form method="post" action="${esc(action)}" autocomplete="off">
<label for="email">Email</label><input id="email" name="email" type="email" value="sandbox@tollgate.local">
<label for="card_number">Card number</label><input id="card_number" name="card_number" inputmode="numeric" value="${esc(TEST_CARD)}" required>
<div class="row"><div><label for="card_expiry">Expiry</label><input id="card_expiry" name="card_expiry" value="12 / 34" required></div>
<div><label for="card_cvc">CVC</label><input id="card_cvc" name="card_cvc" inputmode="numeric" value="123" required></div></div>
<label for="card_name">Name on card</label><input id="card_name" name="card_name" value="Sandbox Tester">
<button type="submit" id="submit">${paying ? `Pay ${esc(usd(s.amount!))}` : 'Save card'}</button>
</form>
<p class="hint">Test cards: <code>4242 4242 4242 4242</code> succeeds, <code>4000 0000 0000 0002</code> is declined${paying ? '' : ', <code>4000 0027 6000 3184</code> saves a card whose automatic charges need authentication'}.</p>
<a class="cancel" href="${esc(s.cancelUrl)}">← Cancel and return</a>`;
  const body = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${paying ? `Pay ${esc(usd(s.amount!))}` : 'Save a card'} · Tollgate sandbox checkout</title><style nonce="${nonce}">${STYLE}</style></head>
<body><div class="banner" role="note">Sandbox — no real charge. No real money is taken: this page stands in for a card processor's checkout.</div>
<main class="wrap"><section><div class="merchant">Tollgate</div>${summary}</section>
<section class="card">${form}</section></main></body></html>`;
  return { status, body, headers: headers(nonce, s) };
}

export function notFoundPage(): Page {
  const nonce = randomBytes(16).toString('base64');
  const body = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Checkout not found · Tollgate sandbox</title><style nonce="${nonce}">${STYLE}</style></head>
<body><div class="banner" role="note">Sandbox — no real charge.</div><main class="wrap"><section class="card"><h1>Checkout not found</h1>
<p>This checkout link is unknown or has expired.</p></section></main></body></html>`;
  return { status: 404, body, headers: headers(nonce, null) };
}

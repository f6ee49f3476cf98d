// The console's only static assets (stylesheet, progressive script, icon), served from strings with immutable caching.
import { createHash } from 'node:crypto';

const CSS = `
:root{--bg:#f5f6f8;--surface:#fff;--border:#e2e5ea;--text:#16191d;--muted:#5f6b7a;--faint:#8a94a3;--accent:#4338ca;--accent-h:#3730a3;
--accent-soft:#eef0ff;--danger:#b42318;--danger-soft:#fdecea;--ok:#107a3b;--ok-soft:#e8f6ee;--warn:#9a6700;--warn-soft:#fff6dd;--radius:10px;
--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--text);font:14px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Noto Sans",sans-serif}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
code,.mono{font-family:var(--mono);font-size:12.5px}
h1{font-size:22px;margin:0 0 4px;letter-spacing:-.01em}h2{font-size:15px;margin:0 0 12px}
p{margin:0 0 12px}.muted{color:var(--muted)}.faint{color:var(--faint)}.small{font-size:12.5px}
.num{font-variant-numeric:tabular-nums;text-align:right;white-space:nowrap}
header.top{background:var(--surface);border-bottom:1px solid var(--border)}
.bar{max-width:1120px;margin:0 auto;padding:0 24px;height:56px;display:flex;align-items:center;gap:28px}
.brand{display:flex;align-items:center;gap:8px;font-weight:650;font-size:15px;color:var(--text)}.brand:hover{text-decoration:none}
.brand img{width:22px;height:22px}.brand small{font-weight:500;color:var(--faint);font-size:12px}
nav.main{display:flex;gap:4px;flex:1}
nav.main a{color:var(--muted);padding:6px 10px;border-radius:7px;font-weight:500}
nav.main a:hover{background:var(--bg);text-decoration:none;color:var(--text)}
nav.main a[aria-current=page]{color:var(--text);background:var(--accent-soft)}
.who{display:flex;align-items:center;gap:14px;color:var(--muted);font-size:13px}
.who a.email{color:inherit}.who a.email[aria-current=page]{color:var(--text);font-weight:600}
.pill{display:inline-block;padding:3px 10px;border-radius:999px;background:var(--ok-soft);color:var(--ok);font-weight:600;font-variant-numeric:tabular-nums}
.pill:hover{text-decoration:none}
main{max-width:1120px;margin:0 auto;padding:28px 24px 64px}
.head{display:flex;align-items:center;justify-content:space-between;gap:16px;margin-bottom:20px}
.card{background:var(--surface);border:1px solid var(--border);border-radius:var(--radius);padding:20px;margin-bottom:20px}
.card.flush{padding:0;overflow:hidden}.card.flush>h2{padding:16px 20px 0}
.card-head{display:flex;justify-content:space-between;align-items:center;padding:16px 20px 12px}.card-head h2{margin:0}
.grid{display:grid;gap:20px}.g2{grid-template-columns:repeat(2,minmax(0,1fr))}.g3{grid-template-columns:repeat(3,minmax(0,1fr))}
@media (max-width:820px){.g2,.g3{grid-template-columns:1fr}.bar{gap:14px}.who .email{display:none}}
.narrow-only{display:none}.narrow-only a{display:inline-block}
@media (max-width:820px){.narrow-only{display:contents}}
.scroll-x{overflow-x:auto;-webkit-overflow-scrolling:touch}
@media (max-width:640px){
.bar{flex-wrap:wrap;height:auto;padding:10px 16px 6px;row-gap:6px}
.who{margin-left:auto;gap:12px}
nav.main{order:3;flex:1 1 100%;margin:0 -10px;overflow-x:auto}
nav.main a{white-space:nowrap}
main{padding:20px 16px 48px}
.head{flex-wrap:wrap}.card{padding:16px}.card-head{padding:14px 16px 10px;gap:10px;flex-wrap:wrap}
.checks{flex-wrap:wrap;gap:8px 16px}
.auth{margin:40px auto}.auth .card{padding:22px}
th,td{padding:8px 10px}.scroll-x th,.scroll-x td{white-space:nowrap}
.chart-wrap{overflow-x:auto;-webkit-overflow-scrolling:touch;direction:rtl}.chart{min-width:800px;direction:ltr}.chart .axis text{font-size:14px}
}
table{width:100%;border-collapse:collapse}
th,td{padding:9px 14px;text-align:left;border-top:1px solid var(--border);vertical-align:middle}
th{font-size:12px;font-weight:600;color:var(--muted);background:#fafbfc;text-transform:uppercase;letter-spacing:.03em;border-top:0;border-bottom:1px solid var(--border)}
tr:first-child td{border-top:0}
td.actions{text-align:right;white-space:nowrap}
tr.revoked td{color:var(--faint)}
.empty{padding:28px 20px;text-align:center;color:var(--muted)}
.tag{display:inline-block;padding:1px 7px;border-radius:5px;background:var(--bg);border:1px solid var(--border);font-size:12px;margin-right:3px;color:var(--muted)}
.tag.ok{background:var(--ok-soft);border-color:#bfe5cd;color:var(--ok)}.tag.off{background:var(--danger-soft);border-color:#f5c6c1;color:var(--danger)}
.tag.warn{background:var(--warn-soft);border-color:#f0dca0;color:var(--warn)}
label{display:block;font-weight:550;font-size:13px;margin-bottom:5px}
.field{margin-bottom:14px}.form-hint{margin:-6px 0 16px}.hint{color:var(--faint);font-size:12px;margin-top:4px;font-weight:400}
input[type=text],input[type=email],input[type=password],input[type=number],select{width:100%;height:38px;padding:0 10px;border:1px solid #cfd4dc;border-radius:7px;
background:#fff;font:inherit;color:inherit}
input:focus,select:focus,button:focus-visible,.btn:focus-visible{outline:2px solid var(--accent);outline-offset:1px;border-color:var(--accent)}
.checks{display:flex;gap:16px;padding-top:4px}.checks label{display:flex;align-items:center;gap:6px;font-weight:400;margin:0}
.row{display:flex;gap:12px;align-items:flex-end;flex-wrap:wrap}.row .field{flex:1;min-width:120px}.row .field.shrink{flex:0 0 auto;min-width:0}
button,.btn{display:inline-flex;align-items:center;justify-content:center;gap:6px;padding:8px 14px;border-radius:7px;border:1px solid var(--accent);
background:var(--accent);color:#fff;font:inherit;font-weight:550;cursor:pointer;white-space:nowrap}
button:hover,.btn:hover{background:var(--accent-h);text-decoration:none}
.btn.secondary,button.secondary{background:#fff;color:var(--text);border-color:#cfd4dc}.btn.secondary:hover,button.secondary:hover{background:var(--bg)}
.btn.danger,button.danger{background:var(--danger);border-color:var(--danger)}.btn.danger:hover,button.danger:hover{background:#912018}
button.link,.btn.link{background:none;border:0;color:var(--accent);padding:0;font-weight:500}button.link:hover{background:none;text-decoration:underline}
.btn.sm,button.sm{padding:4px 10px;font-size:12.5px}
.linklike{color:var(--muted)}.inline{display:inline}
.notice{padding:11px 14px;border-radius:8px;margin-bottom:18px;border:1px solid}
.notice.ok{background:var(--ok-soft);border-color:#bfe5cd;color:#0b5d2c}.notice.err{background:var(--danger-soft);border-color:#f5c6c1;color:#8a1c12}
.notice.info{background:var(--accent-soft);border-color:#d4d8fb;color:#2f2a8f}.notice.warn{background:var(--warn-soft);border-color:#f0dca0;color:#6b4a00}
pre.snippet{font-family:var(--mono);font-size:12.5px;background:#0f1115;color:#e6e8ee;padding:14px 16px;border-radius:8px;margin:0 0 16px;overflow-x:auto;white-space:pre}
.secret{display:flex;gap:8px;margin:6px 0 10px}.secret input{font-family:var(--mono);font-size:13px;background:#fbfbfd}
.stat{font-size:30px;font-weight:650;letter-spacing:-.02em;font-variant-numeric:tabular-nums}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:6px 18px;margin:0}.kv dt{color:var(--muted)}.kv dd{margin:0}
.auth{max-width:400px;margin:72px auto;padding:0 20px}.auth .brand{justify-content:center;margin-bottom:22px;font-size:18px}
.auth .brand img{width:28px;height:28px}.auth .card{padding:28px}.auth button{width:100%;margin-top:4px}
.auth .alt{text-align:center;margin-top:16px;color:var(--muted)}
.chart{display:block;width:100%;height:auto}
.chart .grid line{stroke:#edf0f3}.chart .empty-note{fill:var(--faint);font-size:13px}.chart .axis text{fill:var(--faint);font-size:11px}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;padding:0 20px 16px;font-size:12.5px;color:var(--muted)}
.legend i{display:inline-block;width:10px;height:10px;border-radius:3px;margin-right:6px;vertical-align:-1px}
.chart-wrap{padding:4px 12px 8px}
.tabs{display:flex;gap:4px}.tabs a{padding:4px 10px;border-radius:6px;color:var(--muted);font-size:13px}
.tabs a[aria-current=true]{background:var(--accent-soft);color:var(--text)}
.foot{margin-top:14px;color:var(--faint);font-size:12px}.foot.pad{padding:0 20px 14px}
.error-page{max-width:560px;margin:64px auto}.auth .error-page{margin:0}.narrow{max-width:760px}.spaced{margin-top:16px}
.c0{fill:#4c6ef5;background:#4c6ef5}.c1{fill:#12b886;background:#12b886}.c2{fill:#f59f00;background:#f59f00}.c3{fill:#e64980;background:#e64980}
.c4{fill:#7950f2;background:#7950f2}.c5{fill:#15aabf;background:#15aabf}.c6{fill:#fd7e14;background:#fd7e14}.c7{fill:#868e96;background:#868e96}
`;

const JS = `// Progressive enhancement only: every console page works without this script.
document.addEventListener('click', async (e) => {
  const btn = e.target.closest('[data-copy]');
  if (!btn) return;
  const src = document.getElementById(btn.dataset.copy);
  if (!src) return;
  try { await navigator.clipboard.writeText(src.value); }
  catch { src.focus(); src.select(); document.execCommand('copy'); }
  btn.textContent = 'Copied';
  setTimeout(() => { btn.textContent = 'Copy'; }, 2000);
});
document.addEventListener('focusin', (e) => { if (e.target.matches('input[data-select]')) e.target.select(); });
for (const el of document.querySelectorAll('[data-hidden-until-js]')) el.hidden = false;

// After a checkout: ask for the balance until the payment's credit is in the ledger (or two minutes pass).
const poll = document.querySelector('[data-poll-session]');
if (poll) {
  const session = poll.dataset.pollSession;
  const started = Date.now();
  const tick = async () => {
    try {
      const r = await fetch('/console/billing/balance?session=' + encodeURIComponent(session), { headers: { accept: 'application/json' } });
      if (r.ok) {
        const j = await r.json();
        for (const el of document.querySelectorAll('[data-balance]')) el.textContent = j.balance;
        if (j.cleared) { poll.className = 'notice ok'; poll.textContent = 'Payment received: ' + j.cleared + ' was added to your balance.'; return; }
      }
    } catch {}
    if (Date.now() - started < 120000) setTimeout(tick, 1500);
  };
  setTimeout(tick, 1000);
}
`;

const ICON = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="8" fill="#4338ca"/>`
  + `<path d="M8 11h16M16 11v13" stroke="#fff" stroke-width="3.2" stroke-linecap="round"/><circle cx="23.5" cy="21.5" r="3" fill="#8b9dff"/></svg>`;

export interface Asset { body: string; type: string; path: string }

function asset(name: string, body: string, type: string): Asset {
  const v = createHash('sha256').update(body).digest('hex').slice(0, 10);
  return { body, type, path: `/console/assets/${name}?v=${v}` };
}

export const ASSETS = {
  css: asset('console.css', CSS, 'text/css; charset=utf-8'),
  js: asset('console.js', JS, 'text/javascript; charset=utf-8'),
  icon: asset('icon.svg', ICON, 'image/svg+xml'),
} as const;

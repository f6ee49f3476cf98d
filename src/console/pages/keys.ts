// API keys: the list with usage, create (the full key shown once), edit limits, revoke with a confirmation step.
import { keySpend } from '../../store/accounts.js';
import { createKey, keyByPrefix, keysOfAccount, revokeKey, updateKeyLimits, type KeyRecord } from '../../store/keys.js';
import { html, type Html } from '../html.js';
import { csrfField, notice } from '../layout.js';
import { baseUrl, ConsoleError } from '../http.js';
import { usd, utc } from '../format.js';
import { seeOther, show, type Req } from '../page.js';
import { EMPTY_FIELDS, fieldsFromForm, fieldsFromKey, keyFormFields, parseKeyFields, type KeyFields, type KeyInput } from './key-form.js';

const DONE: Record<string, string> = {
  welcome: 'Welcome to Tollgate. Create your first API key below, then add funds under Billing.',
  saved: 'The key’s limits were saved. They apply to new requests right away.',
  revoked: 'The key was revoked. Requests with it are refused from now on; its usage history stays below.',
};

function defaults(r: Req) {
  return { rpm: r.s.config.limits.defaultRpm, concurrency: r.s.config.limits.defaultConcurrency };
}

function limitsCell(k: KeyRecord, d: { rpm: number; concurrency: number }): Html {
  const ceiling = k.spendLimit === null ? html`<span class="faint">no ceiling</span>`
    : html`${usd(k.spendLimit)} / ${k.spendLimitPeriod === 'daily' ? 'day' : 'month'}`;
  const rate = (v: number | null, dflt: number, unit: string) => v === null ? html`<span class="faint">${dflt} ${unit}</span>` : html`${v} ${unit}`;
  const usage = [[k.tpmLimit, 'tpm'], [k.charsPerMinLimit, 'chars/min'], [k.audioSecsPerMinLimit, 'audio s/min']] as const;
  const set = usage.filter(([v]) => v !== null).map(([v, unit]) => html` · ${v} ${unit}`);
  return html`${ceiling}<div class="small">${rate(k.rpmLimit, d.rpm, 'rpm')} · ${rate(k.concurrencyLimit, d.concurrency, 'concurrent')}${set}${k.fallback ? ' · model fallback' : ''}</div>`;
}

async function keysTable(r: Req): Promise<Html> {
  const keys = (await keysOfAccount(r.s.db, r.session.user.accountId)).sort((a, b) =>
    Number(a.revokedAt !== null) - Number(b.revokedAt !== null) || b.createdAt.getTime() - a.createdAt.getTime());
  if (keys.length === 0) return html`<div class="empty">No keys yet. Create one below to start calling the API.</div>`;
  const spend = await keySpend(r.s.db, keys.map((k) => k.id));
  const d = defaults(r);
  const rows = keys.map((k) => {
    const sp = spend.get(k.id)!;
    const p = encodeURIComponent(k.prefix);
    const status = k.revokedAt ? html`<span class="tag off">revoked</span><div class="small">${utc(k.revokedAt)}</div>` : html`<span class="tag ok">active</span>`;
    const actions = k.revokedAt ? html`` : html`<a class="btn secondary sm" href="/console/keys/${p}">Edit</a>
<a class="btn secondary sm" href="/console/keys/${p}/revoke">Revoke</a>`;
    return html`<tr class="${k.revokedAt ? 'revoked' : ''}" data-prefix="${k.prefix}"><td><code>${k.prefix}…</code><div class="small faint">created ${utc(k.createdAt)}</div></td>
<td class="label">${k.label || html`<span class="faint">—</span>`}</td><td>${k.scopes.map((sc) => html`<span class="tag">${sc}</span>`)}</td>
<td>${limitsCell(k, d)}</td><td class="num">${usd(sp.day)}</td><td class="num">${usd(sp.month)}</td><td>${status}</td><td class="actions">${actions}</td></tr>`;
  });
  return html`<div class="scroll-x"><table><thead><tr><th>Key</th><th>Label</th><th>Scopes</th><th>Limits</th><th class="num">Today</th><th class="num">This month</th><th>Status</th><th></th></tr></thead>
<tbody>${rows}</tbody></table></div>`;
}

async function listPage(r: Req, fields: KeyFields, error: string | null, status = 200): Promise<void> {
  const done = DONE[r.query.get('done') ?? ''];
  const body = html`<div class="head"><div><h1>API keys</h1><p class="muted">Keys authenticate requests to the API. Each one can have its own scopes, spend ceiling and rate limits.</p></div>
<a class="btn" href="#create">Create key</a></div>${notice('ok', done)}
<div class="card flush">${await keysTable(r)}</div>
<div class="card" id="create"><h2>Create a key</h2>${notice('err', error)}
<form method="post" action="/console/keys">${csrfField(r.session.csrf)}${keyFormFields(fields, defaults(r), { scopes: true })}
<button type="submit">Create key</button></form></div>`;
  await show(r, 'API keys', 'keys', body, status);
}

export async function keysPage(r: Req): Promise<void> {
  await listPage(r, EMPTY_FIELDS, null);
}

export async function createKeyAction(r: Req): Promise<void> {
  const fields = fieldsFromForm(r.form!);
  let input: KeyInput;
  try { input = parseKeyFields(fields, true); } catch (e) {
    if (e instanceof RangeError) return listPage(r, fields, e.message, 422);
    throw e;
  }
  const { key, record } = await createKey(r.s.db, {
    accountId: r.session.user.accountId, label: input.label, scopes: input.scopes, spendLimit: input.spendLimit,
    spendLimitPeriod: input.period, rpmLimit: input.rpm, concurrencyLimit: input.concurrency,
    tpmLimit: input.tpm, charsPerMinLimit: input.charsPerMin, audioSecsPerMinLimit: input.audioSecsPerMin, fallback: input.fallback,
  });
  r.s.cache.putKey(record);
  const base = baseUrl(r.s, r.ctx);
  const body = html`<div class="head"><div><h1>Your new API key</h1><p class="muted">${record.label || 'Unlabelled key'} · ${record.scopes.join(', ')}</p></div></div>
<div class="card">${notice('warn', 'Copy this key now and store it somewhere safe. For your security it is shown only this once; Tollgate keeps only a hash of it.')}
<label for="new-key">API key</label><div class="secret"><input id="new-key" type="text" readonly value="${key}" data-select aria-label="API key">
<button type="button" class="secondary" data-copy="new-key" hidden data-hidden-until-js>Copy</button></div>
<p class="muted small">Use it with any OpenAI client:</p>
<pre class="snippet">export OPENAI_BASE_URL=${base}/v1
export OPENAI_API_KEY=${key}</pre>
<a class="btn" href="/console/keys">Done, back to keys</a></div>`;
  await show(r, 'New API key', 'keys', body, 201);
}

async function ownKey(r: Req): Promise<KeyRecord> {
  const k = await keyByPrefix(r.s.db, r.params.prefix ?? '');
  // Someone else's key is "not found" too: the console never confirms that a prefix exists elsewhere.
  if (!k || k.accountId !== r.session.user.accountId) throw new ConsoleError(404, 'There is no such key in this account.', 'Key not found');
  return k;
}

async function editPage(r: Req, k: KeyRecord, fields: KeyFields, error: string | null, status = 200): Promise<void> {
  const p = encodeURIComponent(k.prefix);
  const body = html`<div class="narrow"><div class="head"><div><h1>Edit limits</h1><p class="muted"><code>${k.prefix}…</code> · ${k.label || 'Unlabelled key'} · ${k.scopes.join(', ')}</p></div>
<a class="btn secondary" href="/console/keys">Cancel</a></div>
<div class="card">${notice('err', error)}<form method="post" action="/console/keys/${p}">${csrfField(r.session.csrf)}
${keyFormFields(fields, defaults(r), { scopes: false })}<button type="submit">Save limits</button></form>
<p class="foot">Scopes are fixed when a key is created; create a new key for other scopes.</p></div></div>`;
  await show(r, 'Edit key', 'keys', body, status);
}

export async function editKeyPage(r: Req): Promise<void> {
  const k = await ownKey(r);
  if (k.revokedAt) throw new ConsoleError(409, 'This key is revoked; its limits can no longer change.', 'Key revoked');
  await editPage(r, k, fieldsFromKey(k), null);
}

export async function editKeyAction(r: Req): Promise<void> {
  const k = await ownKey(r);
  if (k.revokedAt) throw new ConsoleError(409, 'This key is revoked; its limits can no longer change.', 'Key revoked');
  const fields = { ...fieldsFromForm(r.form!), scopes: k.scopes };
  let input: KeyInput;
  try { input = parseKeyFields(fields, false); } catch (e) {
    if (e instanceof RangeError) return editPage(r, k, fields, e.message, 422);
    throw e;
  }
  const rec = await updateKeyLimits(r.s.db, k.prefix, {
    label: input.label, spendLimit: input.spendLimit, spendLimitPeriod: input.period, rpmLimit: input.rpm, concurrencyLimit: input.concurrency,
    tpmLimit: input.tpm, charsPerMinLimit: input.charsPerMin, audioSecsPerMinLimit: input.audioSecsPerMin, fallback: input.fallback,
  });
  if (rec) r.s.cache.putKey(rec);
  seeOther(r, '/console/keys?done=saved');
}

export async function revokeKeyPage(r: Req): Promise<void> {
  const k = await ownKey(r);
  if (k.revokedAt) { seeOther(r, '/console/keys'); return; }
  const p = encodeURIComponent(k.prefix);
  const body = html`<div class="narrow"><div class="head"><div><h1>Revoke this key?</h1></div></div>
<div class="card"><dl class="kv"><dt>Key</dt><dd><code>${k.prefix}…</code></dd><dt>Label</dt><dd>${k.label || '—'}</dd>
<dt>Scopes</dt><dd>${k.scopes.join(', ')}</dd><dt>Created</dt><dd>${utc(k.createdAt)}</dd></dl>
<p></p>${notice('err', 'Every request made with this key is refused from the moment you confirm. This cannot be undone; the key’s usage history stays.')}
<form method="post" action="/console/keys/${p}/revoke" class="row">${csrfField(r.session.csrf)}
<button type="submit" class="danger">Revoke key</button><a class="btn secondary" href="/console/keys">Keep it</a></form></div></div>`;
  await show(r, 'Revoke key', 'keys', body);
}

export async function revokeKeyAction(r: Req): Promise<void> {
  const k = await ownKey(r);
  const rec = await revokeKey(r.s.db, k.prefix);
  if (rec) r.s.cache.putKey(rec);
  seeOther(r, '/console/keys?done=revoked');
}

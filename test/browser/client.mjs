// A console client for node:test: a cookie jar, form posts, and a chosen source address (127.0.0.x) so that
// per-IP limits can be told apart from per-email ones.
import http from 'node:http';

export class ConsoleClient {
  constructor(baseUrl, { localAddress } = {}) {
    this.base = new URL(baseUrl);
    this.localAddress = localAddress;
    this.jar = new Map();
  }

  /** → { status, headers, text, cookies }; redirects are returned, not followed. */
  request(path, { method = 'GET', form, headers = {} } = {}) {
    const h = { ...headers };
    if (this.jar.size > 0) h.cookie = [...this.jar].map(([k, v]) => `${k}=${v}`).join('; ');
    let body;
    if (form !== undefined) {
      body = new URLSearchParams(form).toString();
      h['content-type'] ??= 'application/x-www-form-urlencoded';
      h['content-length'] = Buffer.byteLength(body);
    }
    return new Promise((resolve, reject) => {
      const req = http.request({
        host: this.base.hostname, port: this.base.port, path, method, headers: h, localAddress: this.localAddress,
      }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const setCookies = res.headers['set-cookie'] ?? [];
          for (const c of setCookies) {
            const [pair] = c.split(';');
            const i = pair.indexOf('=');
            const name = pair.slice(0, i).trim();
            if (/max-age=0(;|$)/i.test(c)) this.jar.delete(name); else this.jar.set(name, pair.slice(i + 1).trim());
          }
          resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString('utf8'), setCookies });
        });
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  /** The CSRF token in the first form on a page. */
  async csrf(path) {
    const r = await this.request(path);
    const m = /name="csrf" value="([^"]+)"/.exec(r.text);
    if (!m) throw new Error(`no csrf field on ${path} (status ${r.status})`);
    return m[1];
  }

  /** Posts a form with the CSRF token read from `from` (default: the page posted to). */
  async post(path, form = {}, from = path) {
    return this.request(path, { method: 'POST', form: { csrf: await this.csrf(from), ...form } });
  }

  async signup(email, password = 'correct horse battery') {
    const r = await this.post('/console/signup', { email, password });
    if (r.status !== 303) throw new Error(`signup failed with ${r.status}: ${r.text.slice(0, 500)}`);
    return r;
  }

  async login(email, password) {
    return this.post('/console/login', { email, password });
  }

  /** Creates a key through the console; → { key, prefix }. */
  async createKey(fields = {}) {
    const r = await this.post('/console/keys', { label: '', scopes: 'llm', ...fields });
    const m = /id="new-key"[^>]*value="(svc_live_[0-9A-Za-z]+)"/.exec(r.text);
    if (r.status !== 201 || !m) throw new Error(`key create failed with ${r.status}: ${r.text.slice(0, 500)}`);
    return { key: m[1], prefix: m[1].slice(0, 12), page: r };
  }

  async accountId() {
    const r = await this.request('/console/billing');
    const m = /id="account-id">(acct_[0-9A-Za-z]+)</.exec(r.text);
    if (!m) throw new Error(`no account id on the billing page (status ${r.status})`);
    return m[1];
  }
}

/** RFC 4180 parser for checking exports: quoted fields may hold commas, doubled quotes and line breaks. */
export function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; } else if (c === '"') quoted = false; else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(field); field = ''; }
    else if (c === '\r' && text[i + 1] === '\n') { row.push(field); rows.push(row); row = []; field = ''; i++; }
    else field += c;
  }
  if (field !== '' || row.length > 0) { row.push(field); rows.push(row); }
  return rows;
}

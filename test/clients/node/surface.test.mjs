// The surface sweep from the npm packages: every route the official `openai` and `@elevenlabs/elevenlabs-js`
// clients call in a group Tollgate covers (read from the installed packages' source) is called with a minimal
// request against a real gateway; none may answer the generic "no route" 404, a 405 or a 5xx: each is served,
// or refused on purpose with 404 `not_offered`; docs/compatibility.md agrees with what the gateway answered.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { ROOT, startGateway } from './gateway.mjs';

const require = createRequire(import.meta.url);
const OPENAI = join(dirname(require.resolve('openai')), 'resources');
const ELEVENLABS = join(dirname(require.resolve('@elevenlabs/elevenlabs-js')), 'api', 'resources');
// The groups Tollgate covers, as each package's folders (or modules) name them.
const ALPHA_GROUPS = ['chat', 'completions', 'responses', 'embeddings', 'audio', 'files', 'batches', 'models', 'realtime', 'beta/realtime'];
const BETA_GROUPS = ['textToSpeech', 'speechToSpeech', 'speechToText', 'voices', 'samples', 'models', 'user'];
const GEORGE = 'JBFqnCBsd6RMkjVDRZzb'; // a premade voice
const PATH_VALUES = { model: 'sim-chat', voice_id: GEORGE, voiceID: GEORGE };

function jsFiles(root, group) {
  const base = join(root, group);
  // A group is a module, a folder, or both (`chat.js` re-exports what `chat/` holds).
  const out = existsSync(`${base}.js`) ? [`${base}.js`] : [];
  if (!existsSync(base)) return out;
  const walk = (d) => {
    for (const f of readdirSync(d)) {
      const p = join(d, f);
      if (statSync(p).isDirectory()) walk(p);
      else if (f.endsWith('.js')) out.push(p);
    }
  };
  walk(base);
  return out;
}

/** openai: `this._client.post('/files', …)`, `this._client.get(path\`/files/${fileID}\`, …)` → `GET /v1/files/{fileID}`. */
function openaiRoutes() {
  const verbs = { get: 'GET', getAPIList: 'GET', post: 'POST', delete: 'DELETE', patch: 'PATCH', put: 'PUT' };
  const found = new Map();
  for (const group of ALPHA_GROUPS) {
    for (const f of jsFiles(OPENAI, group)) {
      const src = readFileSync(f, 'utf8');
      for (const m of src.matchAll(/this\._client\.(get|getAPIList|post|delete|patch|put)\((?:\(0, path_1\.path\)\s*)?[`'"]([^`'"]+)[`'"]/g)) {
        const route = { method: verbs[m[1]], path: `/v1${m[2].replace(/\$\{(\w+)\}/g, '{$1}')}`, source: relative(OPENAI, f) };
        found.set(`${route.method} ${route.path}`, route);
      }
    }
  }
  return [...found.values()];
}

/** elevenlabs-js: each raw call names its method and path template for its errors: `handleNonStatusCodeError(…, "GET", "/v1/voices/{voice_id}")`. */
function elevenlabsRoutes() {
  const found = new Map();
  for (const group of BETA_GROUPS) {
    for (const f of jsFiles(ELEVENLABS, group)) {
      const src = readFileSync(f, 'utf8');
      for (const m of src.matchAll(/handleNonStatusCodeError\)\(_response\.error, _response\.rawResponse, "(\w+)", "([^"]+)"\)/g)) {
        found.set(`${m[1]} ${m[2]}`, { method: m[1], path: m[2], source: relative(ELEVENLABS, f) });
      }
    }
  }
  return [...found.values()];
}

const FAMILIES = { alpha: { base: '', routes: openaiRoutes }, beta: { base: '/beta', routes: elevenlabsRoutes } };
const shape = (path) => path.replace(/\{\w+\}/g, '{}'); // the packages name path parameters differently

/** docs/compatibility.md's route rows of a family that the npm client calls: "METHOD /path/{}" → state. */
function documented(family) {
  const rows = new Map();
  for (const line of readFileSync(join(ROOT, 'docs', 'compatibility.md'), 'utf8').split('\n')) {
    const cells = line.trim().replace(/^\||\|$/g, '').split('|').map((c) => c.trim().replace(/^`|`$/g, ''));
    if (cells.length < 4 || !['GET', 'POST', 'DELETE', 'PATCH', 'PUT'].includes(cells[0])) continue;
    if (!cells[3].split(',').map((c) => c.trim()).includes('node')) continue;
    const path = cells[1];
    if (family === 'beta' && path.startsWith('/beta/')) rows.set(`${cells[0]} ${shape(path.slice('/beta'.length))}`, cells[2]);
    if (family === 'alpha' && path.startsWith('/v1/')) rows.set(`${cells[0]} ${shape(path)}`, cells[2]);
  }
  return rows;
}

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

for (const family of ['alpha', 'beta']) {
  test(`${family}: every route the npm client calls is served or refused as not offered, as docs/compatibility.md says`, async () => {
    const { base, routes } = FAMILIES[family];
    const list = routes();
    assert.ok(list.length > 15, `only ${list.length} routes read from the package: has its layout changed?`);
    const { key } = await gw.account('5');
    const states = new Map();
    const wrong = [];
    for (const r of list) {
      const path = r.path.replace(/\{(\w+)\}/g, (_, name) => PATH_VALUES[name] ?? `sweep-${name}`);
      const body = ['POST', 'PATCH', 'PUT'].includes(r.method) ? '{}' : undefined;
      const res = await fetch(`${gw.url}${base}${path}`, { method: r.method, body,
        headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) } });
      const text = await res.text();
      let error = {};
      try { error = JSON.parse(text).error ?? {}; } catch { /* audio or an empty body */ }
      if (res.status >= 500 || res.status === 405 || (res.status === 404 && error.code === 'not_found' && String(error.message).startsWith('No route'))) {
        wrong.push(`${r.method} ${base}${r.path} (${r.source}): ${res.status} ${String(error.message).slice(0, 120)}`);
      } else if (error.code === 'not_offered') {
        assert.equal(res.status, 404);
        assert.match(error.message, /not offered by this gateway/);
        states.set(`${r.method} ${shape(r.path)}`, 'not offered');
      } else states.set(`${r.method} ${shape(r.path)}`, 'served');
    }
    assert.deepEqual(wrong, [], 'routes the official client calls that the gateway does not answer on purpose');
    const table = documented(family);
    assert.deepEqual([...states.keys()].filter((k) => !table.has(k)).sort(), [], `docs/compatibility.md lacks these ${family} routes`);
    assert.deepEqual([...table.keys()].filter((k) => !states.has(k)).sort(), [], `docs/compatibility.md lists ${family} routes the npm client does not call`);
    for (const [route, state] of states) {
      assert.equal(table.get(route) === 'not offered', state === 'not offered', `${route}: the table says ${table.get(route)}, the gateway answered as ${state}`);
    }
  });
}

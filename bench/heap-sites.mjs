// What a sampled heap was allocated by: a .heapprofile (bench/heap-watch.cjs's HEAP_WATCH_SAMPLE, or any sampling
// heap profile) as bytes per unit (a stream, a request) by allocation site, or by the nearest of our own functions.
//   node bench/heap-sites.mjs FILE.heapprofile UNITS [--by site|owner] [--top 40]
// site: the allocating function (Node's and V8's own included), with the nearest function of ours (dist/) above it.
// owner: the nearest function of ours above each allocation; '-' when there is none (an event-loop callback of Node's).
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const [file, units] = args;
if (!file || !(Number(units) > 0)) { console.error('usage: node bench/heap-sites.mjs FILE.heapprofile UNITS [--by site|owner] [--top 40]'); process.exit(2); }
const BY = opt('--by', 'site');
const TOP = Number(opt('--top', '40'));

const p = JSON.parse(readFileSync(file, 'utf8'));
const bytes = new Map();
for (const s of p.samples) bytes.set(s.nodeId, (bytes.get(s.nodeId) ?? 0) + s.size);
const short = (f) => `${f.functionName || '(anonymous)'} ${f.url.replace(/.*\/(dist|node_modules)\//, '$1/')}:${f.lineNumber + 1}`;
// http-proxy-3 ships its own dist/: it is the card's package, not ours.
const ours = (f) => /\/dist\//.test(f.url) && !/node_modules/.test(f.url);
let total = 0;
const agg = new Map();
const stack = [];
(function walk(n) {
  stack.push(n.callFrame);
  const s = bytes.get(n.id) ?? 0;
  if (s > 0) {
    total += s;
    let owner = '-';
    for (let i = stack.length - 1; i >= 0; i--) if (ours(stack[i])) { owner = short(stack[i]); break; }
    const key = BY === 'owner' ? owner : `${short(n.callFrame)}  <-  ${owner}`;
    agg.set(key, (agg.get(key) ?? 0) + s);
  }
  for (const c of n.children) walk(c);
  stack.pop();
})(p.head);
console.log(`${Math.round(total / units)} bytes sampled per unit (${(total / 2 ** 20).toFixed(1)} MB over ${units})`);
for (const [k, v] of [...agg].sort((a, b) => b[1] - a[1]).slice(0, TOP)) console.log(`${String(Math.round(v / units)).padStart(7)}  ${k}`);

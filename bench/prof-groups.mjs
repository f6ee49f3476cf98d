// "Where the time goes": a gateway's .cpuprofile (bench/prof.mjs --cpu-prof) as self time per function group, in % of busy time and in µs per request at a given CPU cost per request.
// node bench/prof-groups.mjs FILE.cpuprofile CPU_US_PER_REQUEST
import { readFileSync } from 'node:fs';

const [file, scaleUs = '100'] = process.argv.slice(2);
const p = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const dt = new Map();
for (let i = 0; i < p.samples.length; i++) dt.set(p.samples[i], (dt.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0));
const G = [
  ['idle', (u, f) => f === '(idle)'],
  ['garbage collection', (u, f) => f === '(garbage collector)'],
  ['PGlite (WASM PostgreSQL and its file system)', (u) => /wasm:|chunk-66APQTYC|@electric-sql/.test(u)],
  ['pg (PostgreSQL client)', (u) => /node_modules\/(pg|pg-protocol|pg-pool|pg-types|postgres-)/.test(u)],
  ['ioredis (Redis client)', (u) => /node_modules\/(ioredis|redis-parser|denque|@ioredis|cluster-key-slot|standard-as-callback)/.test(u)],
  ['front end: uWS send/receive, Ctx, router, body', (u) => /dist\/server\//.test(u)],
  ['upstream call: http-proxy-3, proxy/', (u) => /dist\/lib\/http-proxy|http-proxy-3|dist\/proxy\//.test(u)],
  ['validation and parse (families/)', (u) => /dist\/families\//.test(u)],
  ['gate: auth, admission, limits, rate-limit headers', (u) => /dist\/gate\//.test(u)],
  ['exchange and meter (charge, relay, usage, JSON meter)', (u) => /dist\/(exchange|meter)\//.test(u)],
  ['ledger: pricing, settle serialisation, journal, group commit', (u) => /dist\/(ledger|store)\//.test(u)],
  ['observe: metrics, status counters, traces, log', (u) => /dist\/observe\//.test(u)],
];
const agg = new Map();
let total = 0; let idle = 0;
// Native frames (no url: writev, uWS send, JSON.parse) and Node's own (node:*) go to the group of their nearest
// caller in dist/ or node_modules/; what has none (a socket read's callbacks from the event loop) stays Node's.
for (const [id, t] of dt) {
  let n = byId.get(id);
  const f = n.callFrame.functionName;
  let u = n.callFrame.url;
  if (f === '(idle)') { idle += t; continue; }
  total += t;
  if (f !== '(garbage collector)' && f !== '(program)') {
    let cur = id;
    while ((!u || u.startsWith('node:')) && parent.has(cur)) {
      cur = parent.get(cur);
      const up = byId.get(cur).callFrame.url;
      if (up && !up.startsWith('node:')) { u = up; break; }
      if (!u && up) u = up;
    }
  }
  let g = G.find(([, test]) => test(u, f))?.[0];
  if (!g) g = f === '(program)' ? 'V8 and libuv outside JS ((program))' : /^node:/.test(u) ? 'Node internals from the event loop (socket reads: the upstream\'s http parser, streams, events, timers)' : 'other';
  agg.set(g, (agg.get(g) ?? 0) + t);
}
const rows = [...agg].sort((a, b) => b[1] - a[1]);
console.log(`busy ${(total / 1e6).toFixed(1)} s, idle ${(idle / 1e6).toFixed(1)} s; µs at ${scaleUs} µs per request`);
console.log('| group | share of busy | µs per request |\n|---|---:|---:|');
for (const [g, t] of rows) console.log(`| ${g} | ${(100 * t / total).toFixed(1)}% | ${Math.round(t / total * Number(scaleUs))} |`);

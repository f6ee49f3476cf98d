// Renders one bench/results/*.json as the Markdown tables of docs/benchmarks.md: `node bench/report.mjs FILE`.
import { readFileSync } from 'node:fs';

const file = process.argv[2];
if (!file) { console.error('usage: node bench/report.mjs bench/results/<run>.json'); process.exit(2); }
const r = JSON.parse(readFileSync(file, 'utf8'));
const rows = r.results.filter((x) => x.scenario !== 'warmup');
const contenders = [...new Set(r.results.map((x) => x.contender))];
const scenarios = [...new Set(rows.map((x) => x.scenario))];
const us = (v) => (v === null || v === undefined ? '–' : v >= 10_000 ? `${(v / 1000).toFixed(1)} ms` : `${Math.round(v)} µs`);
const ms = (v) => (v === null || v === undefined ? '–' : `${v} ms`);
const pct = (v) => (v === undefined ? '–' : `${(v * 100).toFixed(2)}%`);

const out = [];
out.push(`Run \`${r.command}\` on ${r.date.slice(0, 10)} (${r.mode}); ${r.machine.cores} cores (${r.machine.cpu}), ${r.machine.memory_gib} GiB;`
  + ` Node ${r.machine.node}, Tollgate ${r.versions.tollgate}, LiteLLM ${r.versions.litellm ?? '(not run)'},`
  + ` PostgreSQL ${r.versions.postgres}, Redis ${r.versions.redis}. Raw results: \`${file.replace(/^.*bench\//, 'bench/')}\`.`);
out.push('');
out.push(`Idle RSS: ${contenders.map((c) => `${c} ${r.idle_rss_mb[c]} MB`).join(', ')}.`);
out.push('');
out.push('| scenario | contender | achieved QPS | load p50 / p99 | probe p50 / p99 | added p50 / p99 (probe − direct) | CPU s / 1k req | peak RSS | errors | ledger exact |');
out.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---|');
for (const s of scenarios) {
  const of = rows.filter((x) => x.scenario === s);
  // Repeated rounds of a scenario (streams) are listed one row each.
  const direct = of.find((x) => x.contender === 'direct');
  for (const x of of) {
    const added = x.probe_us && direct?.probe_us && x.contender !== 'direct'
      ? `${us(x.probe_us.p50 - direct.probe_us.p50)} / ${us(x.probe_us.p99 - direct.probe_us.p99)}` : '–';
    out.push(`| ${s} | ${x.contender} | ${x.qps || '–'} | ${x.latency_ms?.p50 === null || x.latency_ms?.p50 === undefined ? '–' : `${ms(x.latency_ms.p50)} / ${ms(x.latency_ms.p99)}`}`
      + ` | ${x.probe_us ? `${us(x.probe_us.p50)} / ${us(x.probe_us.p99)}` : '–'} | ${added} | ${x.cpu_s_per_1k ?? '–'}`
      + ` | ${x.peak_rss_mb ? `${x.peak_rss_mb} MB` : '–'} | ${pct(x.error_rate)} | ${x.ledger ? (x.ledger.exact ? 'yes' : '**no**') : '–'} |`);
  }
}
// Where the machine's CPU went per request (results written before this field existed have none).
const split = rows.filter((x) => x.cpu_us_per_req && /max qps|@2000/.test(x.scenario));
if (split.length > 0) {
  out.push('');
  out.push('CPU per request by process, µs (Redis and PostgreSQL: every such process on the machine):');
  out.push('');
  out.push('| scenario | contender | achieved QPS | contender | sim | Redis | PostgreSQL | autocannon | sum |');
  out.push('|---|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const x of split) {
    const c = x.cpu_us_per_req;
    const sum = [c.contender, c.sim, c.redis, c.postgres, c.autocannon].reduce((a, v) => a + (v ?? 0), 0);
    out.push(`| ${x.scenario} | ${x.contender} | ${x.qps} | ${c.contender ?? '–'} | ${c.sim ?? '–'} | ${c.redis ?? '–'} | ${c.postgres ?? '–'} | ${c.autocannon ?? '–'} | ${sum} |`);
  }
}
console.log(out.join('\n'));

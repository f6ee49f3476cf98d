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
  + ` Node ${r.machine.node}${r.machine.gateway_node ? ` (the Tollgate contenders on ${r.machine.gateway_node})` : ''}, Tollgate ${r.versions.tollgate}, LiteLLM ${r.versions.litellm ?? '(not run)'},`
  + ` PostgreSQL ${r.versions.postgres}, Redis ${r.versions.redis}. Raw results: \`${file.replace(/^.*bench\//, 'bench/')}\`.`);
out.push('');
// Runs since 2026-11-27 10:00 read idle RSS twice: at start, and after 12 s quiet (`idle_rss_mb`, settled); earlier ones only at start.
const rssList = (mb) => contenders.map((c) => `${c} ${mb[c]} MB`).join(', ');
out.push(r.idle_rss_at_start_mb
  ? `Idle RSS, after 12 s quiet: ${rssList(r.idle_rss_mb)} (at start: ${rssList(r.idle_rss_at_start_mb)}).`
  : `Idle RSS: ${rssList(r.idle_rss_mb)}.`);
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
      + ` | ${x.peak_rss_mb ? `${x.peak_rss_mb} MB` : '–'} | ${pct(x.error_rate)} | ${x.ledger ? (x.ledger.exact ? 'yes' : x.ledger.within_dropped ? `over the answered, within the ${x.ledger.within_dropped} dropped` : '**no**') : '–'} |`);
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
// The neutral view (issue 29): what gateway benchmarks elsewhere report, one line per contender.
const probeOf = (scenario, c) => rows.find((x) => x.scenario === scenario && x.contender === c)?.probe_us;
const addedAt = (scenario, c) => {
  const p = probeOf(scenario, c);
  const d = probeOf(scenario, 'direct');
  return p && d ? { p50: p.p50 - d.p50, p99: p.p99 - d.p99 } : null;
};
const rated = scenarios.map((s) => ({ s, rate: Number(/^chat @(\d+) qps$/.exec(s)?.[1]) })).filter((x) => x.rate > 0).sort((a, b) => a.rate - b.rate);
/** The highest rate run at which the contender kept up (≥ 95% of it, no errors) with added p99 under `ms`; `<` the lowest rate when none. */
const highestUnder = (c, ms) => {
  let best = null;
  for (const { s, rate } of rated) {
    const x = rows.find((y) => y.scenario === s && y.contender === c);
    const a = addedAt(s, c);
    if (x && a && !x.error_rate && x.qps >= 0.95 * rate && a.p99 < ms * 1000) best = rate;
  }
  return best === null ? (rated.length ? `< ${rated[0].rate}` : '–') : String(best);
};
const neutral = contenders.filter((c) => c !== 'direct' && rows.some((x) => x.contender === c && (x.probe_us || x.stream_probe)));
if (neutral.length > 0) {
  out.push('');
  out.push(`Neutral view: added latency over direct one request at a time; the highest of the rates run (${rated.map((x) => x.rate).join(', ') || 'none'} QPS) at which`
    + ' the contender kept up with added p99 under each bound; streams held (rounds × streams, failed share); inside the probe\'s streams'
    + ' (bench/stream-probe.mjs, timed read by read, runs since 2026-11-28 14:00), the gap between two reads at p99 and at most, and the stalls'
    + ' (gaps of a second or more) over the streams timed;'
    + ' CPU per request at max rate; peak RSS per open stream over idle:');
  out.push('');
  out.push('| contender | added p50 / p99, sequential | p99 < 1 ms | < 5 ms | < 10 ms | < 50 ms | streams held | gap p99 / max in a stream | stalls | CPU µs / req at max | idle RSS | RSS per stream |');
  out.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const c of neutral) {
    const seq = addedAt('sequential, no load', c);
    const streams = rows.filter((x) => x.contender === c && /^\d+ streams$/.test(x.scenario));
    const n = streams.length ? Number(/^(\d+)/.exec(streams[0].scenario)[1]) : 0;
    const failed = streams.length ? Math.max(...streams.map((x) => x.error_rate ?? 0)) : null;
    const peak = streams.length ? Math.max(...streams.map((x) => x.peak_rss_mb ?? 0)) : null;
    const idle = r.idle_rss_mb[c];
    const perStream = peak && idle && n ? `${Math.round(((peak - idle) * 1024) / n)} KB` : '–';
    const max = rows.find((x) => x.scenario === 'chat max qps' && x.contender === c)?.cpu_us_per_req?.contender;
    // Over every round: the worst round's gap p99, the longest gap, and the stalls over the streams timed.
    const probed = streams.map((x) => x.stream_probe).filter(Boolean);
    const gaps = probed.length ? `${Math.max(...probed.map((p) => p.gap_ms.p99 ?? 0))} ms / ${Math.max(...probed.map((p) => p.gap_ms.max ?? 0))} ms` : '–';
    const stalls = probed.length ? `${probed.reduce((a, p) => a + p.stalls, 0)} in ${probed.reduce((a, p) => a + p.ok, 0)}` : '–';
    out.push(`| ${c} | ${seq ? `${us(seq.p50)} / ${us(seq.p99)}` : '–'} | ${highestUnder(c, 1)} | ${highestUnder(c, 5)} | ${highestUnder(c, 10)} | ${highestUnder(c, 50)}`
      + ` | ${streams.length ? `${streams.length} × ${n}, ${pct(failed)} failed` : '–'} | ${gaps} | ${stalls} | ${max ?? '–'} | ${idle ? `${idle} MB` : '–'} | ${perStream} |`);
  }
}

// What the streams' peak RSS is made of (bench/heap-watch.cjs, runs since 2026-11-28 16:00): per round, V8's heap at most
// and the most a major GC left live in it; the rest of the RSS is outside V8's heap (sockets, buffers, the binaries).
const watched = rows.filter((x) => /^\d+ streams$/.test(x.scenario) && x.heap_watch);
if (watched.length > 0) {
  out.push('');
  out.push('Peak RSS under the streams by part, per contender over its rounds (bench/heap-watch.cjs): V8\'s whole heap at most, the most a major GC'
    + ' left live in it (per open stream: over the streams of a round), and the peak RSS less the heap at its most (what lies outside V8\'s heap);'
    + ' since 2026-11-28 18:20, that outside part split at the major GC that saw the highest RSS: what V8 counts as external (Buffers, native reports),'
    + ' the file-backed pages (binaries, libraries) and the rest (native allocations V8 does not count: sockets, the front end, V8\'s own off-heap memory, malloc\'s slack):');
  out.push('');
  out.push('| contender | peak RSS | V8 heap at most | live after a major GC, at most | live per stream | RSS outside the heap | of it external / files / rest | major GCs per round |');
  out.push('|---|---:|---:|---:|---:|---:|---:|---:|');
  const span = (v) => { const lo = Math.min(...v); const hi = Math.max(...v); return lo === hi ? `${lo}` : `${lo}–${hi}`; };
  const split = (w) => {
    const t = w.map((x) => x.heap_watch.at_top_rss).filter(Boolean);
    if (t.length === 0) return '–';
    const mb = (f) => span(t.map((x) => Math.round(f(x))));
    return `${mb((x) => x.external_mb)} / ${mb((x) => x.file_mb)} / ${mb((x) => x.other_mb)} MB`;
  };
  for (const c of contenders) {
    const w = watched.filter((x) => x.contender === c);
    if (w.length === 0) continue;
    const n = Number(/^(\d+)/.exec(w[0].scenario)[1]);
    out.push(`| ${c} | ${span(w.map((x) => x.peak_rss_mb))} MB | ${span(w.map((x) => x.heap_watch.heap_max_mb))} MB | ${span(w.map((x) => x.heap_watch.live_max_mb))} MB`
      + ` | ${span(w.map((x) => Math.round((x.heap_watch.live_max_mb * 1024) / n)))} KB | ${span(w.map((x) => Math.round(x.peak_rss_mb - x.heap_watch.heap_max_mb)))} MB`
      + ` | ${split(w)} | ${span(w.map((x) => x.heap_watch.major_gcs))} |`);
  }
}
console.log(out.join('\n'));

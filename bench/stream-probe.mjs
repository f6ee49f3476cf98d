// Streams timed read by read, beside bench/run's streams scenario: what autocannon cannot see inside a stream
// that completes. `--loops N` loops each open one stream at a time, back to back, until stdin closes (bench/run
// closes it once the load is done), then let their current stream finish and print one JSON line. Each stream
// on a connection of its own with `--fresh` (bench/run), so the probe's streams wait to be accepted as the
// load's connections do; else on one keep-alive connection per loop.
// The line:
//   ok, failed            streams that ended 2xx with their last event, and the others;
//   first_token_ms        from the request's start to the read that brings its first text (n, p50/p90/p99/max);
//   gap_ms                between two reads of one stream's bytes from that read on (n, p50/p90/p99/max);
//   worst_gap_ms          each stream's longest gap (n, p50/p90/p99/max over streams);
//   stalls                gaps of STALL_MS or more (a reader sees the text stop for a second), and the
//                         streams that had one.
// A read is one `data` event of the response: what a client's read loop gets, whatever SSE events it holds.
// It runs in its own process so the harness's own work (reading /proc every 100 ms) is not timed as a gap.
//
// node bench/stream-probe.mjs --url URL --loops N [--fresh] [-H k=v ...] -b BODY
// STALL_DEBUG=1 (here or on bench/run) prints each stall as it happens: after which read, and whether the read
// it waited for carried the stream's end.
import http from 'node:http';
import { percentiles } from './lib.mjs';

const STALL_MS = 1000;
/** A chat chunk whose delta carries text (the first event of a stream carries the role and no text). */
const FIRST_TOKEN = /"content":"[^"]/;
const args = process.argv.slice(2);
const headers = {};
let url = null; let loops = 10; let fresh = false; let body = '';
for (let i = 0; i < args.length; i++) {
  const a = args[i]; const v = args[i + 1];
  if (a === '--url') { url = new URL(v); i++; } else if (a === '--loops') { loops = Number(v); i++; } else if (a === '--fresh') fresh = true;
  else if (a === '-H') { const j = v.indexOf('='); headers[v.slice(0, j)] = v.slice(j + 1); i++; }
  else if (a === '-b') { body = v; i++; } else throw new Error(`unknown argument ${a}`);
}
if (!url || !(loops > 0)) throw new Error('usage: --url URL --loops N [--fresh] [-H k=v ...] -b BODY');

const firstToken = [];
const gaps = [];
const worst = [];
let ok = 0; let failed = 0; let stalls = 0; let stalledStreams = 0;
let running = true;
process.stdin.on('end', () => { running = false; }).resume();

const ms = (ns) => Number(ns) / 1e6;

function stream(agent) {
  return new Promise((resolve) => {
    const t0 = process.hrtime.bigint();
    let last = 0n; let longest = 0; let stalled = false; let tail = ''; let reads = 0;
    const r = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', agent,
      headers: { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.on('data', (d) => {
        const now = process.hrtime.bigint();
        if (last === 0n) {
          // Gaps count from the first token on: before it a reply may send its headers, and an event with
          // the role and no text, on their own (a gateway's do), and the wait for the first token is its own figure.
          if (!FIRST_TOKEN.test(d.toString('latin1'))) return;
          firstToken.push(ms(now - t0));
        } else {
          const g = ms(now - last);
          gaps.push(g);
          if (g > longest) longest = g;
          if (g >= STALL_MS) {
            stalls++; stalled = true;
            if (process.env.STALL_DEBUG) process.stderr.write(`stall ${g.toFixed(0)} ms after read ${reads} end ${d.includes('[DONE]')} finish ${d.includes('"finish_reason":"')}\n`);
          }
        }
        last = now; reads++;
        tail = (tail + d.toString('latin1')).slice(-64);
      });
      res.on('end', () => {
        const good = res.statusCode >= 200 && res.statusCode < 300 && tail.includes('[DONE]');
        if (good) { ok++; worst.push(longest); if (stalled) stalledStreams++; } else failed++;
        resolve();
      });
      res.on('error', () => { failed++; resolve(); });
    });
    r.on('error', () => { failed++; resolve(); });
    r.end(body);
  });
}

/** lib.mjs's percentiles (n, p50, p90, p99, max), in ms to a tenth. */
function summary(values) {
  return Object.fromEntries(Object.entries(percentiles(values)).map(([k, v]) => [k, k === 'n' || v === null ? v : +v.toFixed(1)]));
}

await Promise.all(Array.from({ length: loops }, async () => {
  const agent = new http.Agent({ keepAlive: !fresh, maxSockets: 1 });
  while (running) await stream(agent);
  agent.destroy();
}));
process.stdout.write(`${JSON.stringify({ ok, failed, stall_ms: STALL_MS, first_token_ms: summary(firstToken),
  gap_ms: summary(gaps), worst_gap_ms: summary(worst), stalls, stalled_streams: stalledStreams })}\n`);

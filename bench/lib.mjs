// Benchmark plumbing: processes, /proc readings, autocannon and the fixed-rate load (bench/paced.mjs) as separate processes, a µs latency probe.
import { spawn, execFileSync } from 'node:child_process';
import { appendFileSync, readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

/**
 * Starts a process and resolves when a stdout/stderr line matches `ready`, or, with `readyUrl`, when
 * that URL answers (for servers that print nothing once they listen, like LiteLLM at log level ERROR).
 */
export function start(name, cmd, args, { env = {}, ready, readyUrl, cwd = ROOT, timeoutMs = 60_000 } = {}) {
  const proc = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  // BENCH_LOGS=DIR: every process's whole output in DIR/<name>.log as well (e.g. a contender's --trace-gc).
  const keep = process.env.BENCH_LOGS ? join(process.env.BENCH_LOGS, `${name.replace(/[^\w.-]/g, '_')}.log`) : null;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start:\n${out.slice(-3000)}`)), timeoutMs);
    const onData = (d) => {
      out += d;
      if (keep) appendFileSync(keep, d);
      if (out.length > 200_000) out = out.slice(-100_000);
      const m = ready?.exec(out);
      if (m) { clearTimeout(timer); resolve({ name, proc, pid: proc.pid, match: m, log: () => out }); }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${name} exited (${code}):\n${out.slice(-3000)}`)); });
    if (readyUrl) {
      const poll = async () => {
        while (proc.exitCode === null) {
          try {
            const r = await fetch(readyUrl, { signal: AbortSignal.timeout(2000) });
            if (r.ok) { clearTimeout(timer); resolve({ name, proc, pid: proc.pid, match: [readyUrl], log: () => out }); return; }
          } catch { /* not listening yet */ }
          await new Promise((r) => setTimeout(r, 500));
        }
      };
      void poll();
    }
  });
}

export async function stop(p) {
  if (!p || p.proc.exitCode !== null) return;
  const done = new Promise((r) => p.proc.once('exit', r));
  try { process.kill(-p.pid, 'SIGTERM'); } catch { /* gone */ }
  await Promise.race([done, new Promise((r) => setTimeout(r, 10_000))]);
  try { process.kill(-p.pid, 'SIGKILL'); } catch { /* gone */ }
}

/** /proc/<pid>/stat: the command name, and the fields after it (`f[0]` is proc(5)'s field 3, the state). */
function procStat(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return { name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), f: stat.slice(stat.lastIndexOf(')') + 2).split(' ') };
}

/** User + system CPU seconds from those fields (utime, stime). */
const cpuSeconds = (f) => (Number(f[11]) + Number(f[12])) / CLK_TCK;

function tree(pid) {
  const kids = new Map();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const ppid = Number(procStat(d).f[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(d));
    } catch { /* raced */ }
  }
  const out = [pid];
  for (let i = 0; i < out.length; i++) out.push(...(kids.get(out[i]) ?? []));
  return out;
}

/** CPU seconds (user + system) and RSS bytes of a process and its descendants. */
export function usage(pid) {
  let cpu = 0;
  let rss = 0;
  for (const p of tree(pid)) {
    try {
      cpu += cpuSeconds(procStat(p).f);
      const st = readFileSync(`/proc/${p}/status`, 'utf8');
      rss += Number(/VmRSS:\s+(\d+)/.exec(st)?.[1] ?? 0) * 1024;
    } catch { /* exited */ }
  }
  return { cpu, rss };
}

/** CPU seconds (user + system) of every process on the machine whose name is one of `names`, by name and pid. */
export function cpuByName(names) {
  const out = Object.fromEntries(names.map((n) => [n, new Map()]));
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const { name, f } = procStat(d);
      if (name in out) out[name].set(d, cpuSeconds(f));
    } catch { /* exited */ }
  }
  return out;
}

/** CPU seconds the processes of `name` used between two `cpuByName` readings (a process that exited in between is left out). */
export function cpuDelta(before, after, name) {
  let s = 0;
  for (const [pid, cpu] of after[name]) s += cpu - (before[name].get(pid) ?? 0);
  return s;
}

/** CPU seconds of this process's children that have exited and been reaped (autocannon, once it is done). */
export function reapedChildrenCpu() {
  const { f } = procStat('self');
  return (Number(f[13]) + Number(f[14])) / CLK_TCK;
}

/** Samples RSS every 100 ms until stopped; returns the peak. */
export function rssSampler(pid) {
  let peak = usage(pid).rss;
  const t = setInterval(() => { peak = Math.max(peak, usage(pid).rss); }, 100);
  return () => { clearInterval(t); return peak; };
}

/**
 * Runs a Node script of the bench in its own process: `done` resolves with the JSON it prints; `what` names it
 * in an error. `stdin` 'pipe' lets the caller end it by closing its standard input.
 */
function jsonProcess(script, args, what, stdin = 'ignore') {
  const proc = spawn(process.execPath, [join(ROOT, script), ...args], { stdio: [stdin, 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { err += d; });
  const done = new Promise((resolve, reject) => proc.once('exit', (code) => {
    try { resolve(JSON.parse(out)); } catch { reject(new Error(`${what} failed (${code}): ${err.slice(-2000)}`)); }
  }));
  return { proc, done };
}

/** Runs a Node script of the bench in its own process and returns the JSON it prints; `what` names it in an error. */
function jsonChild(script, args, what) {
  return jsonProcess(script, args, what).done;
}

/**
 * Streams timed read by read (bench/stream-probe.mjs) in their own process, beside a load: returns a function
 * that ends them (their current streams finish) and resolves with the probe's JSON.
 */
export function streamProbe(args) {
  const { proc, done } = jsonProcess('bench/stream-probe.mjs', args, 'stream probe', 'pipe');
  if (process.env.STALL_DEBUG) proc.stderr.on('data', (d) => process.stderr.write(d));
  return () => { proc.stdin.end(); return done; };
}

/**
 * Runs autocannon in its own process and returns its JSON result. It samples every 50 ms (`-L`): a
 * run ends on a sample tick, so at its default of 1 s the `duration` of a fixed-amount run is rounded
 * up to the next whole second.
 */
export function autocannon(args) {
  return jsonChild('node_modules/autocannon/autocannon.js', ['-j', '-L', '50', ...args], 'autocannon');
}

/** Runs bench/paced.mjs (a load at a fixed rate) in its own process; its JSON has the fields bench/run reads of autocannon's. */
export function paced(args) {
  return jsonChild('bench/paced.mjs', args, 'paced load');
}

/**
 * Sequential requests at a low steady pace beside the load, timed with hrtime: autocannon reports
 * whole milliseconds, the targets are in microseconds.
 */
export function probe(url, { method = 'POST', headers = {}, body, everyMs = 5 }) {
  const u = new URL(url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const lat = [];
  let ok = 0;
  let failed = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const t0 = process.hrtime.bigint();
      const status = await new Promise((resolve) => {
        const r = http.request({ host: u.hostname, port: u.port, path: u.pathname, method, agent,
          headers: { ...headers, ...(body ? { 'content-length': Buffer.byteLength(body) } : {}) } }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode));
        });
        r.on('error', () => resolve(0));
        r.end(body);
      });
      lat.push(Number(process.hrtime.bigint() - t0) / 1000);
      if (status >= 200 && status < 300) ok++; else failed++;
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return async () => {
    running = false;
    await loop;
    agent.destroy();
    return { ...percentiles(lat), ok, failed };
  };
}

export function percentiles(values) {
  const v = [...values].sort((a, b) => a - b);
  const at = (q) => (v.length ? v[Math.min(v.length - 1, Math.floor(q * v.length))] : null);
  return { n: v.length, p50: at(0.5), p90: at(0.9), p99: at(0.99), max: v.at(-1) ?? null };
}

export async function json(url, init) {
  const r = await fetch(url, init);
  const text = await r.text();
  try { return JSON.parse(text); } catch { throw new Error(`${url}: ${r.status} ${text.slice(0, 300)}`); }
}

// A load at a fixed rate, as bench/run's rate scenarios need it: request i is due at start + i / rate and goes
// out on the first timer tick at or after that (Node's timers fire about every millisecond), on a free
// keep-alive connection. One that finds every connection busy waits for one and is timed from when it was
// due, so a stall shows in the latency of every request it held back (no coordinated omission); the others
// are timed from when they were sent.
//
// autocannon's -R cannot do this: it gives each connection a budget of rate / connections requests per
// second and sends them back to back as soon as the second starts, every connection's second starting
// together. At -c 100 -R 2000 the requests of a second all went in its first 200-300 ms, at full speed,
// and none in the rest (docs/benchmarks.md, "The rate scenarios were bursts").
//
// node bench/paced.mjs --url URL --rate R (--amount N | --duration S) [--connections 100] [-m POST] [-H k=v ...] [-b BODY]
// Prints one JSON line in the shape bench/run reads of autocannon: requests.total, 2xx, non2xx, errors,
// timeouts, duration (s), latency p50/p90/p99/max (ms), and late (requests sent more than 1 ms after due: the
// timers' lag, or every connection busy) and dropped (a run of a duration: due, and still waiting for a connection
// when it ended).
import net from 'node:net';

const args = process.argv.slice(2);
const headers = [];
let url = null; let rate = 0; let amount = 0; let duration = 0; let connections = 100; let method = 'GET'; let body = '';
for (let i = 0; i < args.length; i++) {
  const a = args[i]; const v = args[i + 1];
  if (a === '--url') { url = new URL(v); i++; } else if (a === '--rate') { rate = Number(v); i++; } else if (a === '--amount') { amount = Number(v); i++; }
  else if (a === '--duration') { duration = Number(v); i++; } else if (a === '--connections') { connections = Number(v); i++; }
  else if (a === '-m') { method = v; i++; } else if (a === '-H') { const j = v.indexOf('='); headers.push([v.slice(0, j), v.slice(j + 1)]); i++; }
  else if (a === '-b') { body = v; i++; } else throw new Error(`unknown argument ${a}`);
}
if (!url || !(rate > 0) || !(amount > 0 || duration > 0)) throw new Error('usage: --url URL --rate R (--amount N | --duration S)');
let total = amount > 0 ? amount : Math.round(rate * duration);
const TIMEOUT_MS = 10_000;
const payload = Buffer.from(body);
const request = Buffer.concat([Buffer.from(`${method} ${url.pathname}${url.search} HTTP/1.1\r\nhost: ${url.host}\r\n`
  + headers.map(([k, v]) => `${k}: ${v}\r\n`).join('') + `content-length: ${payload.length}\r\n\r\n`), payload]);

const lat = new Float64Array(total); // µs, from due to the response's last byte
let sent = 0; let done = 0; let ok = 0; let non2xx = 0; let errors = 0; let timeouts = 0; let late = 0; let dropped = 0;
const waiting = []; // due times (ns) of requests due with no free connection
const free = [];
const start = process.hrtime.bigint();
const nowNs = () => Number(process.hrtime.bigint() - start);

/** One keep-alive connection: one request at a time; the response read by its Content-Length or its chunks. */
class Conn {
  constructor() { this.due = 0; this.busy = false; this.buf = Buffer.alloc(0); this.timer = null; this.open(); }
  open() {
    this.sock = net.connect({ host: url.hostname, port: Number(url.port || 80), noDelay: true });
    this.sock.on('data', (d) => this.read(d));
    this.sock.on('error', () => {});
    this.sock.on('close', () => { if (this.busy) this.finish('error'); this.buf = Buffer.alloc(0); if (done < total) this.open(); });
  }
  /** `queued`: it waited for a connection, and is timed from when it was due; otherwise from now (the timer's own lag is not the server's). */
  send(due, queued) {
    const now = nowNs();
    this.busy = true; this.due = queued ? due : now;
    if (now - due > 1e6) late++;
    this.timer = setTimeout(() => { this.finish('timeout'); this.sock.destroy(); }, TIMEOUT_MS);
    this.sock.write(request);
  }
  read(d) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    const end = this.buf.indexOf('\r\n\r\n');
    if (end < 0) return;
    const head = this.buf.subarray(0, end).toString('latin1');
    const status = Number(head.slice(9, 12));
    const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
    let size;
    if (cl) {
      size = end + 4 + Number(cl[1]);
      if (this.buf.length < size) return;
    } else if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
      let p = end + 4;
      for (;;) {
        const eol = this.buf.indexOf('\r\n', p);
        if (eol < 0) return;
        const n = parseInt(this.buf.subarray(p, eol).toString('latin1'), 16);
        p = eol + 2 + n + 2;
        if (this.buf.length < p) return;
        if (n === 0) break;
      }
      size = p;
    } else return; // a response without a length ends with its connection: not one this harness meets
    this.buf = this.buf.length > size ? this.buf.subarray(size) : Buffer.alloc(0);
    this.finish(status >= 200 && status < 300 ? 'ok' : 'non2xx');
  }
  finish(outcome) {
    if (!this.busy) return;
    clearTimeout(this.timer);
    this.busy = false;
    lat[done++] = (nowNs() - this.due) / 1000;
    if (outcome === 'ok') ok++; else if (outcome === 'non2xx') non2xx++; else if (outcome === 'timeout') timeouts++; else errors++;
    if (done === total) { report(); return; }
    if (waiting.length > 0) this.send(waiting.shift(), true); else free.push(this);
  }
}

function report() {
  const secs = nowNs() / 1e9;
  const sorted = Array.from(lat.subarray(0, done)).sort((a, b) => a - b);
  const pct = (p) => +(sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] / 1000).toFixed(3);
  process.stdout.write(`${JSON.stringify({ requests: { total: done }, '2xx': ok, non2xx, errors, timeouts, duration: +secs.toFixed(3), late, dropped,
    latency: { p50: pct(50), p90: pct(90), p99: pct(99), max: +(sorted[sorted.length - 1] / 1000).toFixed(3) } })}\n`);
  process.exit(0);
}

for (let i = 0; i < connections; i++) free.push(new Conn());
// Every millisecond (as often as Node's timers fire), the requests now due go out.
const tick = () => {
  const due = Math.min(total, Math.floor((nowNs() / 1e9) * rate) + 1);
  for (; sent < due; sent++) {
    const at = Math.round((sent / rate) * 1e9);
    const c = free.pop();
    if (c) c.send(at, false); else waiting.push(at);
  }
  // A run of a duration ends on time: the requests still waiting for a connection then are dropped (counted,
  // not sent), and the run reports once those in flight have answered. A run of an amount sends every one.
  if (duration > 0 && nowNs() >= duration * 1e9 && sent === total) {
    dropped = waiting.length;
    waiting.length = 0;
    total = sent - dropped;
    if (done === total) report();
    return;
  }
  if (sent < total || duration > 0) setTimeout(tick, 1);
};
tick();

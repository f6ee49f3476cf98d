// A diagnostic preload for the gateway (`node --require bench/tail-hooks.cjs dist/cli.js serve ...`), used by
// `bench/prof.mjs --sequential N --tail FILE`: it records, in wall-clock milliseconds (performance.timeOrigin +
// performance.now(), the same clock the client uses), every garbage collection, every PostgreSQL query, every
// Redis command and every upstream HTTP call the process makes, and writes them to $TAIL_OUT when it exits.
// Nothing of it is in the gateway: the bench wraps the libraries' own prototypes from outside.
'use strict';
const { performance, PerformanceObserver, constants } = require('node:perf_hooks');
const { writeFileSync } = require('node:fs');
const http = require('node:http');

const OUT = process.env.TAIL_OUT;
const events = []; // [kind, start ms, end ms, detail]
const now = () => performance.timeOrigin + performance.now();
const GC_KINDS = { [constants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge', [constants.NODE_PERFORMANCE_GC_MAJOR]: 'mark-compact', [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental', [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak' };

new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const s = performance.timeOrigin + e.startTime;
    events.push(['gc', s, s + e.duration, GC_KINDS[e.detail?.kind] ?? String(e.detail?.kind)]);
  }
}).observe({ entryTypes: ['gc'] });

try {
  const pg = require('pg');
  const q = pg.Client.prototype.query;
  pg.Client.prototype.query = function (config, values, cb) {
    const s = now();
    const text = typeof config === 'string' ? config : (config?.name ?? config?.text ?? '');
    const end = () => { events.push(['pg', s, now(), String(text).slice(0, 40).replace(/\s+/g, ' ')]); };
    // pg-pool passes a callback (as the values or the third argument): record when it is called
    if (typeof values === 'function') { const f = values; values = function (...a) { end(); return f.apply(this, a); }; }
    else if (typeof cb === 'function') { const f = cb; cb = function (...a) { end(); return f.apply(this, a); }; }
    else if (config && typeof config.callback === 'function') { const f = config.callback; config.callback = function (...a) { end(); return f.apply(this, a); }; }
    const r = q.call(this, config, values, cb);
    if (r && typeof r.then === 'function') r.then(end, end);
    return r;
  };
} catch { /* pg is not loaded from here */ }

try {
  const Redis = require('ioredis');
  const send = Redis.prototype.sendCommand;
  Redis.prototype.sendCommand = function (command, stream) {
    const s = now();
    const r = send.call(this, command, stream);
    const end = () => { events.push(['redis', s, now(), command.name === 'evalsha' || command.name === 'eval' ? `script/${String(command.args?.[1] ?? '')} keys` : command.name]); };
    command.promise?.then(end, end);
    return r;
  };
} catch { /* ioredis is not loaded from here */ }

const request = http.request;
http.request = function (...args) {
  const s = now();
  const req = request.apply(this, args);
  req.once('response', (res) => {
    const h = now();
    res.once('end', () => events.push(['upstream', s, now(), `headers after ${(h - s).toFixed(2)} ms`]));
  });
  return req;
};

// With TAIL_LOOP=1, the event loop's stalls: a 1 ms interval whose late firings say when the loop was busy. Off by
// default: a process woken every millisecond never sleeps long, which changes the very wake-ups being measured.
if (process.env.TAIL_LOOP === '1') {
  let last = now();
  setInterval(() => {
    const t = now();
    if (t - last > 3) events.push(['loop-late', last, t, `${(t - last).toFixed(2)} ms between 1 ms ticks`]);
    last = t;
  }, 1).unref();
}

process.on('exit', () => {
  if (OUT) writeFileSync(OUT, JSON.stringify(events));
});

// With TAIL_ALLOC=FILE, a sampling heap profile of every allocation, collected ones included (what the process
// allocates per request, not what it keeps), written to FILE as a .heapprofile on exit. With TAIL_ALLOC_OLD=1,
// only what outlived a scavenge (promoted, whether it died later in the old generation or is still alive):
// what each scavenge had to copy.
if (process.env.TAIL_ALLOC) {
  const inspector = require('node:inspector');
  const session = new inspector.Session();
  session.connect();
  session.post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: process.env.TAIL_ALLOC_OLD !== '1' });
  process.on('exit', () => {
    session.post('HeapProfiler.stopSampling', (err, r) => { if (!err) writeFileSync(process.env.TAIL_ALLOC, JSON.stringify(r.profile)); });
  });
}

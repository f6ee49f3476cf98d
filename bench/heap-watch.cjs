// Preloaded (--require) into the gateway and the floor by bench/run: after each major GC, one line on stderr
// with the heap it left live (outside the young generation), V8's whole heap and the process's RSS, so a run
// can say what its peak RSS is made of (docs/benchmarks.md, "Peak RSS under 9,900 streams: what it is made
// of"). A major GC is rare (tens in a streams round, about one a second at max rate); scavenges are not reported.
// The RSS outside V8's heap is told apart too: what V8 counts as external to it (Buffers and other ArrayBuffers'
// memory, and what native code reported), and the RSS's file-backed pages (the binaries and libraries mapped).
// And V8's heap by space, each as the bytes it holds and the bytes in use in it (where the heap's slack is:
// the young generation, old-space pages left part-used, large objects).
//   HEAPWATCH t=<ms since epoch> live=<bytes> heap=<bytes> rss=<bytes> ext=<bytes> file=<bytes> spaces=<name>:<size>:<used>,...
// With HEAP_WATCH_SAMPLE=FILE it also samples allocations (one in 16 KiB) and, at the first major GC that
// leaves more than HEAP_WATCH_SAMPLE_MB (default 200) live, writes the samples still alive to FILE as a
// .heapprofile: what the live heap at that moment was allocated by (bench/heap-sites.mjs reads it). `{pid}` in
// FILE is the process's pid (the floor and the gateway both load this).
'use strict';
const v8 = require('node:v8');
const { PerformanceObserver, constants } = require('node:perf_hooks');
const { writeFileSync, readFileSync } = require('node:fs');

/** The RSS's file-backed pages (`RssFile` in /proc/self/status), in bytes; 0 where there is no /proc. */
function rssFile() {
  try {
    const m = /^RssFile:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'latin1'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch { return 0; }
}

const sampleFile = process.env.HEAP_WATCH_SAMPLE?.replace('{pid}', String(process.pid));
let session = null;
if (sampleFile) {
  const inspector = require('node:inspector');
  session = new inspector.Session();
  session.connect();
  session.post('HeapProfiler.startSampling', { samplingInterval: 16384 });
}
const sampleAbove = Number(process.env.HEAP_WATCH_SAMPLE_MB ?? 200) * 2 ** 20;

const observer = new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    if (e.detail?.kind !== constants.NODE_PERFORMANCE_GC_MAJOR) continue;
    // Read when the GC's notice reaches JavaScript, a moment after it ended: the young generation holds what was
    // allocated since, so "live" is the rest of the heap in use (the old generation, large objects, code).
    let live = 0;
    let spaces = '';
    for (const sp of v8.getHeapSpaceStatistics()) {
      if (!sp.space_name.startsWith('new_')) live += sp.space_used_size;
      if (sp.space_size > 0) spaces += `${spaces ? ',' : ''}${sp.space_name.replace(/_space$/, '')}:${sp.space_size}:${sp.space_used_size}`;
    }
    const heap = v8.getHeapStatistics().total_heap_size;
    const mem = process.memoryUsage();
    process.stderr.write(`HEAPWATCH t=${Date.now()} live=${live} heap=${heap} rss=${mem.rss} ext=${mem.external} file=${rssFile()} spaces=${spaces}\n`);
    if (session && live > sampleAbove) {
      const s = session;
      session = null;
      s.post('HeapProfiler.getSamplingProfile', (err, r) => {
        if (!err) writeFileSync(sampleFile, JSON.stringify(r.profile));
        s.post('HeapProfiler.stopSampling', () => s.disconnect());
      });
    }
  }
});
observer.observe({ entryTypes: ['gc'] });

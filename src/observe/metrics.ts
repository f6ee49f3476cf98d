// Prometheus counters and histograms for /metrics, kept as plain numbers (no client library needed).

/** One upstream's line in /metrics (src/proxy/pool.ts fills it; the label set is the configured names: bounded). */
export interface UpstreamHealth {
  name: string; healthy: boolean; inFlight: number; ejections: number; retries: number; busy: number;
  /** Requests let through on this instance's own limits because Redis (the shared limits) could not be asked. */
  failOpen?: number;
}

const BUCKETS_MS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

class Histogram {
  readonly counts = new Map<string, { buckets: number[]; sum: number; count: number }>();
  observe(label: string, ms: number): void {
    let h = this.counts.get(label);
    if (!h) { h = { buckets: BUCKETS_MS.map(() => 0), sum: 0, count: 0 }; this.counts.set(label, h); }
    for (let i = 0; i < BUCKETS_MS.length; i++) if (ms <= BUCKETS_MS[i]!) h.buckets[i]!++;
    h.sum += ms; h.count++;
  }
}

export class Metrics {
  readonly requests = new Map<string, number>();
  readonly rejections = new Map<string, number>();
  readonly latency = new Histogram();
  readonly overhead = new Histogram();
  ledgerWrites = (): number => 0;
  inFlight = (): number => 0;
  openHolds = (): number => 0;
  pendingDebits = (): number => 0;
  retryingDebits = (): number => 0;
  commitFailures = (): number => 0;
  parkedDebits = (): number => 0;
  recoveredDebits = (): number => 0;
  keyLookups = (): number => 0;
  /** Upstream calls started before their admission answered (Redis limits): admitted, refused. */
  admissionOverlap = (): { admitted: number; refused: number } | null => null;
  /** Spare holds (gate/spares.ts): placed, taken by a request, given back unused. */
  spareHolds = (): { placed: number; used: number; returned: number } | null => null;
  /** Per configured upstream (a bounded label set): health, in flight, ejections, retries, busy refusals. */
  upstreamHealth = (): UpstreamHealth[] => [];
  /** The front end serving (server/io.ts): uws or node. */
  frontEnd = '';

  request(route: string, status: number, totalMs: number, upstreamMs: number): void {
    const k = `route="${route}",status="${status}"`;
    this.requests.set(k, (this.requests.get(k) ?? 0) + 1);
    this.latency.observe(`route="${route}"`, totalMs);
    if (upstreamMs > 0) this.overhead.observe(`route="${route}"`, Math.max(0, totalMs - upstreamMs));
  }

  rejection(reason: string): void {
    this.rejections.set(reason, (this.rejections.get(reason) ?? 0) + 1);
  }

  render(): string {
    const out: string[] = [];
    out.push('# HELP tollgate_requests_total Requests handled, by route and status.', '# TYPE tollgate_requests_total counter');
    for (const [k, v] of this.requests) out.push(`tollgate_requests_total{${k}} ${v}`);
    out.push('# HELP tollgate_admission_rejections_total Requests refused at admission, by reason.', '# TYPE tollgate_admission_rejections_total counter');
    for (const [k, v] of this.rejections) out.push(`tollgate_admission_rejections_total{reason="${k}"} ${v}`);
    const overlap = this.admissionOverlap();
    if (overlap) {
      out.push('# HELP tollgate_admission_overlap_total Upstream calls started while admission placed the hold (far from every limit), by its answer; a refused one was abandoned unbilled.', '# TYPE tollgate_admission_overlap_total counter');
      out.push(`tollgate_admission_overlap_total{outcome="admitted"} ${overlap.admitted}`, `tollgate_admission_overlap_total{outcome="refused"} ${overlap.refused}`);
    }
    const spares = this.spareHolds();
    if (spares) {
      out.push('# HELP tollgate_spare_holds_total Holds admitted for a key\'s next request between two of its requests: placed, used (that request took no admission round trip), returned unused (rpm token given back).', '# TYPE tollgate_spare_holds_total counter');
      out.push(`tollgate_spare_holds_total{outcome="placed"} ${spares.placed}`, `tollgate_spare_holds_total{outcome="used"} ${spares.used}`, `tollgate_spare_holds_total{outcome="returned"} ${spares.returned}`);
    }
    hist(out, 'tollgate_request_duration_ms', 'Time from request to response end.', this.latency);
    hist(out, 'tollgate_gateway_overhead_ms', 'Request time minus upstream time, for proxied requests.', this.overhead);
    out.push('# HELP tollgate_ledger_writes_total Ledger entries committed.', '# TYPE tollgate_ledger_writes_total counter');
    out.push(`tollgate_ledger_writes_total ${this.ledgerWrites()}`);
    out.push('# HELP tollgate_in_flight_requests Requests being handled now.', '# TYPE tollgate_in_flight_requests gauge');
    out.push(`tollgate_in_flight_requests ${this.inFlight()}`);
    out.push('# HELP tollgate_open_holds In-flight spend holds this instance has placed.', '# TYPE tollgate_open_holds gauge');
    out.push(`tollgate_open_holds ${this.openHolds()}`);
    out.push('# HELP tollgate_key_store_lookups_total Store reads for keys and client secrets not in memory: single-key lookups and reads of the change feed a miss waits for (both bounded a second).', '# TYPE tollgate_key_store_lookups_total counter');
    out.push(`tollgate_key_store_lookups_total ${this.keyLookups()}`);
    out.push('# HELP tollgate_pending_debits Priced debits made durable by this instance and not yet committed to the ledger.', '# TYPE tollgate_pending_debits gauge');
    out.push(`tollgate_pending_debits ${this.pendingDebits()}`);
    out.push('# HELP tollgate_retrying_debits Pending debits whose last commit attempt failed (PostgreSQL unreachable); retried with backoff.', '# TYPE tollgate_retrying_debits gauge');
    out.push(`tollgate_retrying_debits ${this.retryingDebits()}`);
    out.push('# HELP tollgate_debit_commit_failures_total Debit commit attempts that failed and were retried.', '# TYPE tollgate_debit_commit_failures_total counter');
    out.push(`tollgate_debit_commit_failures_total ${this.commitFailures()}`);
    out.push('# HELP tollgate_parked_debits_total Debits the ledger refused for their content, parked in parked_debits for an operator (alert above 0).', '# TYPE tollgate_parked_debits_total counter');
    out.push(`tollgate_parked_debits_total ${this.parkedDebits()}`);
    out.push('# HELP tollgate_recovered_debits_total Debits this instance committed for a dead instance or from its journal at start.', '# TYPE tollgate_recovered_debits_total counter');
    out.push(`tollgate_recovered_debits_total ${this.recoveredDebits()}`);
    upstreams(out, this.upstreamHealth());
    if (this.frontEnd) {
      out.push('# HELP tollgate_frontend_info The front end serving HTTP and WebSocket (uws: uWebSockets.js; node: node:http).', '# TYPE tollgate_frontend_info gauge');
      out.push(`tollgate_frontend_info{frontend="${this.frontEnd}"} 1`);
    }
    return `${out.join('\n')}\n`;
  }
}

function upstreams(out: string[], list: UpstreamHealth[]): void {
  if (list.length === 0) return;
  const rows: [string, string, string, (u: UpstreamHealth) => number][] = [
    ['tollgate_upstream_healthy', 'gauge', '1 while the upstream takes requests, 0 while it is ejected (passive or active health).', (u) => (u.healthy ? 1 : 0)],
    ['tollgate_upstream_in_flight', 'gauge', 'Requests (and session sockets) this instance has open to the upstream.', (u) => u.inFlight],
    ['tollgate_upstream_ejections_total', 'counter', 'Times the upstream was ejected for failing.', (u) => u.ejections],
    ['tollgate_upstream_retries_total', 'counter', 'Attempts on the upstream that failed before any output and went on to another upstream.', (u) => u.retries],
    ['tollgate_upstream_busy_total', 'counter', 'Requests refused 503 upstream_busy while the upstream was at its max_concurrency, rpm or Retry-After pause.', (u) => u.busy],
    ['tollgate_upstream_limits_fail_open_total', 'counter', 'Requests sent under this instance\'s own max_concurrency and rpm because Redis, where the instances share them, could not be asked.', (u) => u.failOpen ?? 0],
  ];
  for (const [name, type, help, value] of rows) {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const u of list) out.push(`${name}{upstream="${u.name}"} ${value(u)}`);
  }
}

function hist(out: string[], name: string, help: string, h: Histogram): void {
  out.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
  for (const [label, v] of h.counts) {
    BUCKETS_MS.forEach((b, i) => { out.push(`${name}_bucket{${label},le="${b}"} ${v.buckets[i]}`); });
    out.push(`${name}_bucket{${label},le="+Inf"} ${v.count}`, `${name}_sum{${label}} ${v.sum}`, `${name}_count{${label}} ${v.count}`);
  }
}

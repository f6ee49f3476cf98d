// OpenTelemetry traces without the SDK: one span per request with child spans per stage, exported as OTLP/HTTP JSON in bounded batches.
import { randomFillSync } from 'node:crypto';
import { log } from './log.js';

type AttrValue = string | number | boolean;
export type Attrs = Record<string, AttrValue>;

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** Unix time in nanoseconds, to the microsecond. */
export function nowNs(): bigint {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;
}

/** Random ids from a pool refilled 4 KiB at a time: one crypto call per ~500 ids, not one per id. */
const pool = Buffer.alloc(4096);
let used = pool.length;
function hex(bytes: number): string {
  if (used + bytes > pool.length) { randomFillSync(pool); used = 0; }
  used += bytes;
  return pool.toString('hex', used - bytes, used);
}

interface ChildSpan { name: string; spanId: string; kind: number; start: bigint; end: bigint; attrs: Attrs }
interface SpanEvent { name: string; at: bigint; attrs: Attrs }

/** OTLP span kinds. */
const INTERNAL = 1;
const SERVER = 2;
const CLIENT = 3;

/**
 * One request's trace: a SERVER span, and child spans for auth, admission, the upstream call (CLIENT,
 * whose id goes upstream in `traceparent`) and the settle; metering is an event. An incoming W3C
 * `traceparent` makes this span its child, in its trace.
 */
export class RequestTrace {
  readonly traceId: string;
  readonly spanId = hex(8);
  readonly parentSpanId: string;
  /** The upstream call's span id, chosen up front so the upstream's own spans can hang under it. */
  readonly upstreamSpanId = hex(8);
  readonly start = nowNs();
  readonly attrs: Attrs = {};
  readonly children: ChildSpan[] = [];
  readonly events: SpanEvent[] = [];
  /** When the previous stage ended: the next child span starts there. */
  mark = this.start;
  upstreamStart = 0n;

  constructor(incoming: string | undefined) {
    const m = incoming ? TRACEPARENT.exec(incoming.trim()) : null;
    const valid = m && !/^0+$/.test(m[1]!) && !/^0+$/.test(m[2]!);
    this.traceId = valid ? m[1]! : hex(16);
    this.parentSpanId = valid ? m[2]! : '';
  }

  /** A child span from the last mark to now. */
  stage(name: string, attrs: Attrs = {}): void {
    const end = nowNs();
    this.children.push({ name, spanId: hex(8), kind: INTERNAL, start: this.mark, end, attrs });
    this.mark = end;
  }

  upstreamBegins(): void {
    this.stage('tollgate.admission');
    this.upstreamStart = nowNs();
  }

  upstreamEnds(attrs: Attrs = {}): void {
    if (this.upstreamStart === 0n) return;
    const end = nowNs();
    this.children.push({ name: 'tollgate.upstream', spanId: this.upstreamSpanId, kind: CLIENT, start: this.upstreamStart, end, attrs });
    this.upstreamStart = 0n;
    this.mark = end;
  }

  event(name: string, attrs: Attrs = {}): void {
    this.events.push({ name, at: nowNs(), attrs });
  }

  /** The `traceparent` sent upstream: this trace, the upstream call's span. */
  get outgoing(): string {
    return `00-${this.traceId}-${this.upstreamSpanId}-01`;
  }
}

function attributes(a: Attrs): unknown[] {
  return Object.entries(a).map(([key, v]) => ({
    key, value: typeof v === 'string' ? { stringValue: v } : typeof v === 'boolean' ? { boolValue: v }
      : Number.isInteger(v) ? { intValue: String(v) } : { doubleValue: v },
  }));
}

export interface ExporterOptions { endpoint: string; serviceName: string; headers: Record<string, string>; maxQueue: number; batch: number; intervalMs: number }

/**
 * Batches finished spans and POSTs them to `<endpoint>/v1/traces` as OTLP/HTTP JSON. The queue is
 * bounded (spans past it are dropped and counted), and no request ever waits on an export.
 */
export class OtlpExporter {
  private queue: unknown[] = [];
  private timer: NodeJS.Timeout | undefined;
  private sending: Promise<void> = Promise.resolve();
  dropped = 0;
  exported = 0;
  failed = 0;
  private readonly url: string;

  constructor(private readonly o: ExporterOptions) {
    this.url = `${o.endpoint.replace(/\/+$/, '')}/v1/traces`;
    this.timer = setInterval(() => { this.flush(); }, o.intervalMs);
    this.timer.unref();
  }

  /** Queues the request's spans (its own and its children). */
  end(t: RequestTrace, status: number): void {
    const end = nowNs();
    const spans: unknown[] = [{
      traceId: t.traceId, spanId: t.spanId, ...(t.parentSpanId ? { parentSpanId: t.parentSpanId } : {}),
      name: String(t.attrs['tollgate.span_name'] ?? 'request'), kind: SERVER,
      startTimeUnixNano: String(t.start), endTimeUnixNano: String(end),
      attributes: attributes({ ...t.attrs, 'http.response.status_code': status }),
      events: t.events.map((e) => ({ name: e.name, timeUnixNano: String(e.at), attributes: attributes(e.attrs) })),
      status: { code: status >= 500 ? 2 : 0 },
    }];
    for (const c of t.children) {
      spans.push({ traceId: t.traceId, spanId: c.spanId, parentSpanId: t.spanId, name: c.name, kind: c.kind,
        startTimeUnixNano: String(c.start), endTimeUnixNano: String(c.end), attributes: attributes(c.attrs), status: { code: 0 } });
    }
    if (this.queue.length + spans.length > this.o.maxQueue) { this.dropped += spans.length; return; }
    for (const s of spans) this.queue.push(s);
    if (this.queue.length >= this.o.batch) this.flush();
  }

  /** Sends what is queued (one request at a time; failures are counted and logged, never retried forever). */
  flush(): Promise<void> {
    if (this.queue.length === 0) return this.sending;
    const spans = this.queue.splice(0, this.o.batch);
    const body = JSON.stringify({ resourceSpans: [{
      resource: { attributes: attributes({ 'service.name': this.o.serviceName }) },
      scopeSpans: [{ scope: { name: 'tollgate' }, spans }],
    }] });
    this.sending = this.sending.then(async () => {
      try {
        const res = await fetch(this.url, { method: 'POST', headers: { 'content-type': 'application/json', ...this.o.headers }, body, signal: AbortSignal.timeout(5000) });
        await res.arrayBuffer();
        if (!res.ok) throw new Error(`status ${res.status}`);
        this.exported += spans.length;
      } catch (e) {
        this.failed += spans.length;
        if (this.failed === spans.length || this.failed % 1000 < spans.length) log('warn', 'trace export failed', { endpoint: this.url, error: String((e as Error)?.message ?? e) });
      }
    });
    return this.sending;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    while (this.queue.length > 0) await this.flush();
    await this.sending;
  }
}

/** gen_ai.operation.name for a route (OpenTelemetry GenAI semantic conventions), or the route's own name. */
export function operationOf(route: string): string {
  if (route.includes('chat') || route.includes('responses')) return 'chat';
  if (route.includes('embeddings')) return 'embeddings';
  if (route.includes('completions')) return 'text_completion';
  return route;
}

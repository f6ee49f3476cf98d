// The status summary (statuspage.io's summary.json shape) and the health+json report, from live traffic and dependency state.
import type { Availability, Area, WindowFigures, WindowName } from './availability.js';
import type { DependencyCheck, HealthMonitor } from './health.js';

export type ComponentStatus = 'operational' | 'degraded_performance' | 'partial_outage' | 'major_outage';
export type Indicator = 'none' | 'minor' | 'major' | 'critical';
export type ReviewArea = 'compatibility' | 'authentication' | 'billing';

const ORDER: ComponentStatus[] = ['operational', 'degraded_performance', 'partial_outage', 'major_outage'];
const worst = (...s: ComponentStatus[]): ComponentStatus => ORDER[Math.max(...s.map((x) => ORDER.indexOf(x)))]!;
const INDICATOR: Record<ComponentStatus, [Indicator, string]> = {
  operational: ['none', 'All Systems Operational'],
  degraded_performance: ['minor', 'Minor Service Outage'],
  partial_outage: ['major', 'Partial System Outage'],
  major_outage: ['critical', 'Major Service Outage'],
};

export interface StatusDeps {
  availability: Availability;
  health: HealthMonitor;
  /** Debits priced and durable but not committed to the ledger, and how many of them are failing to commit. */
  backlog: () => { pending: number; retrying: number };
  /** The pools (each model's upstreams) each family's models use. */
  familyUpstreams: { alpha: readonly (readonly string[])[]; beta: readonly (readonly string[])[] };
  lastReviewed: Readonly<Record<ReviewArea, string>>;
  pageUrl: () => string;
}

export interface Component {
  id: string; name: string; description: string; status: ComponentStatus; position: number;
  group_id: string | null; group: boolean; components?: string[];
  created_at: string; updated_at: string; last_reviewed_at: string;
  availability: Record<WindowName, WindowFigures>;
  checks: Record<string, DependencyCheck>;
}

/** Below this many counted requests in five minutes, failures alone show at most degraded performance. */
const MIN_SAMPLE = 20;

/** A status from the last five minutes of traffic: no traffic is no evidence of an outage. */
function fromTraffic(f: Record<WindowName, WindowFigures>): ComponentStatus {
  const w = f['5m'];
  if (w.availability === null || w.server_failures === 0) return 'operational';
  if (w.successes + w.server_failures < MIN_SAMPLE) return 'degraded_performance';
  if (w.availability >= 0.99) return 'degraded_performance';
  return w.availability >= 0.5 ? 'partial_outage' : 'major_outage';
}

const depStatus = (c: DependencyCheck, down: ComponentStatus): ComponentStatus => (c.state === 'down' ? down : 'operational');

/** Computes the summary on request; remembers since when each component has had its status (its `updated_at`). */
export class StatusBoard {
  private readonly since = new Map<string, { status: ComponentStatus; at: string }>();
  private readonly created = new Date().toISOString();
  constructor(private readonly d: StatusDeps) {}

  /**
   * A family's upstreams: a model is out only when every upstream of its pool is down (requests fail
   * over to the others); one down inside a pool that still serves is degraded performance.
   */
  private upstreamStatus(pools: readonly (readonly string[])[]): { status: ComponentStatus; checks: Record<string, DependencyCheck> } {
    const all = this.d.health.upstreams();
    const checks: Record<string, DependencyCheck> = {};
    let poolsDown = 0;
    let someDown = false;
    for (const pool of pools) {
      let down = 0;
      for (const n of pool) {
        const c = all.get(n);
        if (!c) continue;
        checks[`upstream:${n}`] = c;
        if (c.state === 'down') down++;
      }
      if (down > 0) someDown = true;
      if (down > 0 && down === pool.length) poolsDown++;
    }
    const status = poolsDown === 0 ? (someDown ? 'degraded_performance' : 'operational') : poolsDown === pools.length ? 'major_outage' : 'partial_outage';
    return { status, checks };
  }

  components(): Component[] {
    const h = this.d.health;
    const pg = h.postgres;
    const redis = h.redisState;
    const pay = h.payments();
    const backlog = this.d.backlog();
    const av = (a: Area) => this.d.availability.figures(a);
    const out: Omit<Component, 'updated_at' | 'created_at' | 'position' | 'group' | 'group_id'>[] = [];
    for (const fam of ['alpha', 'beta'] as const) {
      const up = this.upstreamStatus(this.d.familyUpstreams[fam]);
      const f = av(fam);
      out.push({ id: `compatibility-${fam}`, name: `Compatibility: ${fam}`,
        description: fam === 'alpha' ? 'The OpenAI API shape (/alpha/v1 and /v1)' : 'The ElevenLabs API shape (/beta/v1)',
        status: worst(fromTraffic(f), up.status, depStatus(redis, 'major_outage')), last_reviewed_at: this.d.lastReviewed.compatibility,
        availability: f, checks: { redis, ...up.checks } });
    }
    const auth = av('authentication');
    out.push({ id: 'authentication', name: 'Authentication', description: 'API keys: known keys are answered from memory; a key not in memory needs PostgreSQL',
      status: worst(fromTraffic(auth), depStatus(pg, 'degraded_performance')), last_reviewed_at: this.d.lastReviewed.authentication, availability: auth, checks: { postgres: pg } });
    const ledger = av('ledger');
    const ledgerDegraded: ComponentStatus = backlog.retrying > 0 ? 'degraded_performance' : 'operational';
    out.push({ id: 'billing-ledger', name: 'Billing: ledger', description: 'Admission, holds and debits: debits journaled and not yet committed show it as degraded',
      status: worst(fromTraffic(ledger), depStatus(pg, 'degraded_performance'), depStatus(redis, 'major_outage'), ledgerDegraded),
      last_reviewed_at: this.d.lastReviewed.billing, availability: ledger,
      checks: { postgres: pg, redis, backlog: { state: backlog.retrying > 0 ? 'down' : 'up', observedAt: new Date().toISOString(), since: new Date().toISOString(),
        detail: `${backlog.pending} debits pending, ${backlog.retrying} failing to commit` } } });
    const payments = av('payments');
    out.push({ id: 'billing-payments', name: 'Billing: payments', description: 'Top-ups and saved cards through the payment provider',
      status: worst(fromTraffic(payments), depStatus(pay, 'partial_outage'), depStatus(pg, 'partial_outage')),
      last_reviewed_at: this.d.lastReviewed.billing, availability: payments, checks: { payments: pay, postgres: pg } });
    const now = new Date().toISOString();
    const comps: Component[] = out.map((c, i) => {
      const prev = this.since.get(c.id);
      if (!prev || prev.status !== c.status) this.since.set(c.id, { status: c.status, at: now });
      return { ...c, position: i + 1, group: false, group_id: c.id.startsWith('billing-') ? 'billing' : null, created_at: this.created, updated_at: this.since.get(c.id)!.at };
    });
    const billing = comps.filter((c) => c.group_id === 'billing');
    const gStatus = worst(...billing.map((c) => c.status));
    comps.push({ id: 'billing', name: 'Billing', description: 'The ledger and payments', status: gStatus, position: comps.length + 1, group: true, group_id: null,
      components: billing.map((c) => c.id), created_at: this.created, updated_at: billing.map((c) => c.updated_at).sort().at(-1)!,
      last_reviewed_at: this.d.lastReviewed.billing, availability: ledger, checks: {} });
    return comps;
  }

  /** statuspage.io's summary.json: page, status, components (incidents and maintenances are always empty here). */
  summary(pageUrl = this.d.pageUrl()): Record<string, unknown> {
    const components = this.components();
    const [indicator, description] = INDICATOR[worst(...components.map((c) => c.status))];
    return {
      page: { id: 'tollgate', name: 'Tollgate', url: pageUrl, time_zone: 'Etc/UTC', updated_at: new Date().toISOString() },
      status: { indicator, description },
      components,
      incidents: [],
      scheduled_maintenances: [],
    };
  }

  /** draft-inadarei-api-health-check: pass, warn or fail, with a check per dependency. */
  health(): { status: 'pass' | 'warn' | 'fail'; body: Record<string, unknown> } {
    const h = this.d.health;
    const checks: Record<string, unknown[]> = {};
    const one = (name: string, c: DependencyCheck, componentType: string) => {
      checks[name] = [{ componentType, status: c.state === 'down' ? 'fail' : c.state === 'up' ? 'pass' : 'warn', time: c.observedAt, ...(c.detail ? { output: c.detail } : {}) }];
    };
    one('postgresql:connection', h.postgres, 'datastore');
    one('redis:connection', h.redisState, 'datastore');
    one('payments:provider', h.payments(), 'system');
    for (const [n, c] of h.upstreams()) one(`upstream:${n}`, c, 'system');
    const backlog = this.d.backlog();
    checks['ledger:backlog'] = [{ componentType: 'component', observedValue: backlog.pending, observedUnit: 'debits', status: backlog.retrying > 0 ? 'warn' : 'pass' }];
    const ready = h.ready();
    let status: 'pass' | 'warn' | 'fail' = ready.ready ? 'pass' : 'fail';
    if (status === 'pass' && Object.values(checks).some((l) => (l[0] as { status: string }).status !== 'pass')) status = 'warn';
    return { status, body: { status, serviceId: 'tollgate', description: 'Tollgate gateway instance', ...(ready.reason ? { output: ready.reason } : {}), checks } };
  }
}

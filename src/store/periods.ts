// UTC calendar periods for key spend ceilings: the day and the month a moment falls in.

let memo: { until: number; from: number; starts: { day: string; month: string } } = { until: 0, from: 0, starts: { day: '', month: '' } };

/** The UTC day and month `now` falls in (memoised for the rest of the UTC hour: every admission asks). */
export function periodStarts(now: Date): { day: string; month: string } {
  const t = now.getTime();
  if (t >= memo.from && t < memo.until) return memo.starts;
  const iso = now.toISOString();
  const from = t - (t % 3_600_000);
  memo = { from, until: from + 3_600_000, starts: { day: iso.slice(0, 10), month: `${iso.slice(0, 7)}-01` } };
  return memo.starts;
}

/** Seconds until the period that contains `now` ends (UTC), for reset hints. */
export function secondsToPeriodEnd(now: Date, period: 'daily' | 'monthly'): number {
  const end = period === 'daily'
    ? Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1)
    : Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1);
  return Math.ceil((end - now.getTime()) / 1000);
}

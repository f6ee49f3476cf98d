// UTC calendar periods for key spend ceilings: the day and the month a moment falls in.

export function periodStarts(now: Date): { day: string; month: string } {
  const iso = now.toISOString();
  return { day: iso.slice(0, 10), month: `${iso.slice(0, 7)}-01` };
}

/** Seconds until the period that contains `now` ends (UTC), for reset hints. */
export function secondsToPeriodEnd(now: Date, period: 'daily' | 'monthly'): number {
  const end = period === 'daily'
    ? Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1)
    : Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1);
  return Math.ceil((end - now.getTime()) / 1000);
}

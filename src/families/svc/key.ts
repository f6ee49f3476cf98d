// GET /svc/v1/key: what the calling key is, what it may spend, what it has spent, and the account balance.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import { effectiveLimits } from '../../gate/admission.js';
import { nanoToDollars } from '../../money.js';

export function keyRoutes(s: Services): Route[] {
  return [{
    method: 'GET', path: '/v1/key', name: 'svc.key', scope: 'any',
    handler: async (ctx) => {
      const key = ctx.key!;
      // The ledger's figures, less what has been priced and not yet committed (a few milliseconds' worth):
      // this instance's own commits under way are let land first, so none is counted in both.
      await s.committer.settled(key.accountId);
      const [committed, ledgerSpend, pending] = await Promise.all([s.cache.balanceOf(key.accountId), s.cache.spendOf(key.id), s.limiter.pendingOf(key.accountId, key.id)]);
      const balance = committed - pending.account;
      const spend = { day: ledgerSpend.day + pending.key, month: ledgerSpend.month + pending.key };
      const periodSpent = key.spendLimitPeriod === 'daily' ? spend.day : spend.month;
      const remaining = key.spendLimit === null ? null : key.spendLimit > periodSpent ? key.spendLimit - periodSpent : 0n;
      ctx.json(200, {
        label: key.label,
        prefix: key.prefix,
        limit: key.spendLimit === null ? null : nanoToDollars(key.spendLimit),
        limit_remaining: remaining === null ? null : nanoToDollars(remaining),
        limit_reset: key.spendLimitPeriod,
        usage_daily: nanoToDollars(spend.day),
        usage_monthly: nanoToDollars(spend.month),
        // rpm and concurrency (the server's defaults when the key sets none), and the per-minute usage limits (null: none).
        rate_limit: { ...effectiveLimits(key, s.admission), tpm: key.tpmLimit, characters_per_minute: key.charsPerMinLimit, audio_seconds_per_minute: key.audioSecsPerMinLimit },
        // Opted in to model fallback: a request naming no `models` may be served by its model's configured fallbacks.
        fallback: key.fallback,
        balance: nanoToDollars(balance),
      });
    },
  }];
}

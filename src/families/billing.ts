// The settle stage for a proxied request: price the usage, write the debit, then drop the hold.
import type { Services } from '../server/app.js';
import type { Hold } from '../gate/admission.js';
import type { ModelConfig } from '../config.js';
import { priceTokens, type TokenUsage } from '../ledger/pricing.js';
import type { Nanodollars } from '../ledger/money.js';
import type { Ctx } from '../server/context.js';
import { log } from '../server/log.js';

export interface Billed { cost: Nanodollars; applied: boolean }

/** Debits the priced usage under the request id (idempotent), then releases the hold; zero usage bills nothing. */
export async function settleUsage(s: Services, ctx: Ctx, hold: Hold, nonce: string, model: ModelConfig, usage: TokenUsage, extra: Record<string, unknown> = {}): Promise<Billed> {
  const cost = priceTokens(model, usage);
  try {
    if (cost === 0n && usage.input === 0 && usage.output === 0) return { cost, applied: false };
    const r = await s.settler.submit({
      idemKey: ctx.requestId, nonce, accountId: hold.accountId, keyId: hold.keyId, kind: 'debit', amount: cost,
      reason: ctx.routeName, model: model.id, usage: { input_tokens: usage.input, output_tokens: usage.output, ...extra },
    });
    return { cost, applied: r.applied };
  } catch (e) {
    log('error', 'settle failed', { request_id: ctx.requestId, error: String(e) });
    throw e;
  } finally {
    // After the commit, so the debit is in the balance before the hold leaves it; not awaited, so the
    // response does not wait for the limiter's round trip (shutdown waits for pending releases).
    void hold.release();
  }
}

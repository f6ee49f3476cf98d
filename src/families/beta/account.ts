// GET /beta/v1/models, /beta/v1/user and /beta/v1/user/subscription: the speech models, and the caller's account in the family's user and subscription shapes.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { Ctx } from '../../server/context.js';
import { accountById } from '../../store/accounts.js';
import { modelView } from './views.js';
import { voiceCounts } from '../../store/voices.js';
import { charactersSince } from '../../store/ledger-reads.js';

/** ElevenLabs caps a character count at what a 32-bit counter holds; an unpriced (free) model leaves it there. */
const UNBOUNDED_CHARACTERS = 2_147_483_647;

export function accountRoutes(s: Services): Route[] {
  const speech = s.models.models.filter((m) => m.kind === 'tts' || m.kind === 'sts');
  // Characters are worth most at the dearest TTS model: the limit is what the balance buys at any of them.
  const dearest = s.models.models.filter((m) => m.kind === 'tts').reduce<bigint>((max, m) => (m.prices.perMChar > max ? m.prices.perMChar : max), 0n);
  const cloning = s.models.models.some((m) => m.voiceCloning);
  return [
    { method: 'GET', path: '/v1/models', name: 'beta.models', scope: 'voice',
      handler: async (ctx) => ctx.json(200, speech.map(modelView)) },
    { method: 'GET', path: '/v1/user/subscription', name: 'beta.subscription', scope: 'voice',
      handler: async (ctx) => ctx.json(200, await subscription(ctx)) },
    // The user object carries the same subscription: the account is the user and its own workspace.
    { method: 'GET', path: '/v1/user', name: 'beta.user', scope: 'voice',
      handler: async (ctx) => {
        const key = ctx.key!;
        const [sub, account] = await Promise.all([subscription(ctx), accountById(s.db, key.accountId)]);
        ctx.json(200, {
          user_id: key.accountId,
          workspace_id: key.accountId,
          subscription: sub,
          subscription_extras: null,
          is_new_user: false,
          can_use_delayed_payment_methods: false,
          is_onboarding_completed: true,
          is_onboarding_checklist_completed: true,
          first_name: null,
          // Keys are stored hashed: only their prefix can be shown.
          is_api_key_hashed: true,
          xi_api_key_preview: `${key.prefix}…`,
          referral_link_code: null,
          partnerstack_partner_default_link: null,
          created_at: account ? Math.floor(account.createdAt.getTime() / 1000) : 0,
          seat_type: 'workspace_admin',
        });
      } },
  ];

  /** The caller's account in the family's subscription shape. */
  async function subscription(ctx: Ctx): Promise<Record<string, unknown>> {
    const key = ctx.key!;
    await s.committer.settled(key.accountId);
    const now = new Date();
    const monthStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
    const nextReset = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1) / 1000;
    const [committed, pending, chars, voices] = await Promise.all([
      s.cache.balanceOf(key.accountId), s.limiter.pendingOf(key.accountId, key.id),
      charactersSince(s.db, key.accountId, monthStart),
      voiceCounts(s.db, key.accountId, monthStart),
    ]);
    const balance = committed - pending.account;
    const used = chars;
    // per_mchar is nanodollars per 1M characters: characters bought = balance × 1M / per_mchar.
    const buys = dearest === 0n ? UNBOUNDED_CHARACTERS
      : balance <= 0n ? 0 : Number(bigMin((balance * 1_000_000n) / dearest, BigInt(UNBOUNDED_CHARACTERS)));
    return {
      tier: 'tollgate_prepaid',
      character_count: used,
      character_limit: Math.min(used + buys, UNBOUNDED_CHARACTERS),
      max_character_limit_extension: null,
      // Fields the current clients require beyond the specification: a prepaid account has no overage and no invoices.
      max_credit_limit_extension: 0,
      professional_voice_slots_used_in_workspace: 0,
      current_overage: { amount: '0', currency: 'usd' },
      open_invoices: [],
      can_extend_character_limit: false,
      allowed_to_extend_character_limit: false,
      next_character_count_reset_unix: nextReset,
      voice_slots_used: voices.held,
      professional_voice_slots_used: 0,
      voice_limit: s.config.voices.maxPerAccount,
      max_voice_add_edits: null,
      voice_add_edit_counter: voices.addedSince,
      professional_voice_limit: 0,
      can_extend_voice_limit: false,
      can_use_instant_voice_cloning: cloning,
      can_use_professional_voice_cloning: false,
      currency: 'usd',
      status: balance > 0n ? 'active' : 'free_disabled',
      billing_period: 'monthly_period',
      character_refresh_period: 'monthly_period',
      has_open_invoices: false,
    };
  }
}

function bigMin(a: bigint, b: bigint): bigint { return a < b ? a : b; }

-- Card payments: checkout sessions, processed webhook events, saved cards, and automatic top-up.

-- One row per hosted checkout session Tollgate created: `payment` tops up the balance, `setup` saves a card.
CREATE TABLE billing_sessions (
  id            text PRIMARY KEY,                      -- the provider's session id (cs_...)
  account_id    text NOT NULL REFERENCES accounts(id),
  provider      text NOT NULL CHECK (provider IN ('sandbox', 'stripe')),
  mode          text NOT NULL CHECK (mode IN ('payment', 'setup')),
  amount_nd     bigint CHECK (amount_nd IS NULL OR amount_nd > 0),
  currency      text NOT NULL,
  status        text NOT NULL DEFAULT 'open'
                CHECK (status IN ('open', 'awaiting_payment', 'paid', 'failed', 'expired', 'complete')),
  success_url   text NOT NULL,                         -- may hold {CHECKOUT_SESSION_ID}
  cancel_url    text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  completed_at  timestamptz,
  CHECK ((mode = 'payment') = (amount_nd IS NOT NULL))
);
CREATE INDEX billing_sessions_account ON billing_sessions (account_id, created_at);

-- Webhook events already handled: a redelivery is acknowledged and skipped.
CREATE TABLE billing_events (
  id            text PRIMARY KEY,
  type          text NOT NULL,
  processed_at  timestamptz NOT NULL DEFAULT now()
);

-- The provider's customer for an account and the card saved on it for off-session charges.
CREATE TABLE billing_customers (
  account_id      text NOT NULL REFERENCES accounts(id),
  provider        text NOT NULL CHECK (provider IN ('sandbox', 'stripe')),
  customer_id     text NOT NULL,
  payment_method  text,
  card_saved_at   timestamptz,                         -- creation time of the session that saved it (newest wins)
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (account_id, provider),
  UNIQUE (provider, customer_id)
);

-- Automatic top-up: settings, and the charge state. `attempt` numbers charges: one attempt is one
-- idempotency key, so a dip charges once however many instances see it; it advances on a final outcome.
CREATE TABLE auto_topup (
  account_id         text PRIMARY KEY REFERENCES accounts(id),
  enabled            boolean NOT NULL DEFAULT false,
  threshold_nd       bigint NOT NULL CHECK (threshold_nd > 0),
  amount_nd          bigint NOT NULL CHECK (amount_nd > 0),
  attempt            bigint NOT NULL DEFAULT 1,
  charging           boolean NOT NULL DEFAULT false,   -- a charge is in flight or awaits its webhook
  charge_started_at  timestamptz,
  blocked            boolean NOT NULL DEFAULT false,   -- a decline stops charges until the settings or the card change
  status             text CHECK (status IS NULL OR status IN ('processing', 'succeeded', 'authentication_required', 'card_declined', 'failed')),
  status_at          timestamptz,
  payment_intent     text,
  retry_at           timestamptz,                      -- after a transient failure, not before
  updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX auto_topup_enabled ON auto_topup (account_id) WHERE enabled;

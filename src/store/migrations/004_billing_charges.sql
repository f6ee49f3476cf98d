-- Saved-card charges Tollgate made (auto top-up), recorded before the provider is asked: a payment_intent
-- event credits only when it matches one (account, attempt, amount, currency, and its payment intent once known).
CREATE TABLE billing_charges (
  account_id      text NOT NULL REFERENCES accounts(id),
  attempt         bigint NOT NULL,                      -- auto_topup.attempt: one idempotency key per attempt
  provider        text NOT NULL CHECK (provider IN ('sandbox', 'stripe')),
  amount_nd       bigint NOT NULL CHECK (amount_nd > 0),
  currency        text NOT NULL,
  payment_intent  text,                                 -- bound by the provider's answer or the first matching event
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (account_id, attempt)
);

-- Accounts, keys, the ledger and per-key period spend: the source of truth for money.
CREATE SEQUENCE IF NOT EXISTS change_seq;

CREATE OR REPLACE FUNCTION bump_version() RETURNS trigger AS $$
BEGIN
  NEW.version := nextval('change_seq');
  NEW.updated_at := clock_timestamp();
  RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE TABLE accounts (
  id          text PRIMARY KEY,
  email       text NOT NULL UNIQUE,
  balance_nd  bigint NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  version     bigint NOT NULL DEFAULT nextval('change_seq')
);
CREATE TRIGGER accounts_version BEFORE UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION bump_version();

CREATE TABLE api_keys (
  id                 text PRIMARY KEY,
  account_id         text NOT NULL REFERENCES accounts(id),
  prefix             text NOT NULL UNIQUE,
  key_hash           text NOT NULL UNIQUE,
  label              text NOT NULL DEFAULT '',
  scopes             text[] NOT NULL,
  spend_limit_nd     bigint CHECK (spend_limit_nd IS NULL OR spend_limit_nd >= 0),
  spend_limit_period text CHECK (spend_limit_period IN ('daily', 'monthly')),
  rpm_limit          integer CHECK (rpm_limit IS NULL OR rpm_limit > 0),
  concurrency_limit  integer CHECK (concurrency_limit IS NULL OR concurrency_limit > 0),
  revoked_at         timestamptz,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
  version            bigint NOT NULL DEFAULT nextval('change_seq'),
  CHECK ((spend_limit_nd IS NULL) = (spend_limit_period IS NULL))
);
CREATE INDEX api_keys_account ON api_keys (account_id);
CREATE INDEX api_keys_updated ON api_keys (updated_at);
CREATE TRIGGER api_keys_version BEFORE UPDATE ON api_keys FOR EACH ROW EXECUTE FUNCTION bump_version();

-- Credits are positive, debits negative; balance_nd always equals the sum of an account's entries.
CREATE TABLE ledger (
  id          bigserial PRIMARY KEY,
  account_id  text NOT NULL REFERENCES accounts(id),
  key_id      text REFERENCES api_keys(id),
  idem_key    text NOT NULL UNIQUE,
  nonce       text,
  kind        text NOT NULL CHECK (kind IN ('credit', 'debit')),
  amount_nd   bigint NOT NULL,
  reason      text NOT NULL,
  model       text,
  usage       jsonb,
  created_at  timestamptz NOT NULL DEFAULT now(),
  CHECK ((kind = 'credit' AND amount_nd >= 0) OR (kind = 'debit' AND amount_nd <= 0))
);
CREATE INDEX ledger_account_time ON ledger (account_id, created_at);
CREATE INDEX ledger_key_time ON ledger (key_id, created_at);

-- UTC calendar periods; one row per key, period kind and period start.
CREATE TABLE key_spend (
  key_id        text NOT NULL REFERENCES api_keys(id),
  period        text NOT NULL CHECK (period IN ('day', 'month')),
  period_start  date NOT NULL,
  spent_nd      bigint NOT NULL DEFAULT 0,
  updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  version       bigint NOT NULL DEFAULT nextval('change_seq'),
  PRIMARY KEY (key_id, period, period_start)
);
CREATE INDEX key_spend_updated ON key_spend (updated_at);

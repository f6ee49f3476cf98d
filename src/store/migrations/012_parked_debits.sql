-- Debits the ledger refused for what they hold (issue 23): parked here, with the error, for an operator, instead of retried for ever.
-- No index on anything a client supplied: the entry is kept as text (its JSON), looked up by account.
CREATE TABLE parked_debits (
  id          bigserial PRIMARY KEY,
  account_id  text NOT NULL,
  amount_nd   bigint NOT NULL,
  entry       text NOT NULL,
  error       text NOT NULL,
  parked_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX parked_debits_account ON parked_debits (account_id, parked_at);

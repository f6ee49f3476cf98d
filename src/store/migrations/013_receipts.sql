-- Receipts (issue 28): the signing key every instance shares, the few requests that end with nothing billed, and
-- the indexes that find a request's ledger entries and a batch line's request id.

-- One Ed25519 key pair, made by the first instance that needs it (a configured key takes its place).
CREATE TABLE receipt_keys (
  id           text PRIMARY KEY,
  private_key  text NOT NULL,        -- PKCS#8 DER, base64
  public_key   text NOT NULL,        -- the raw 32 bytes, base64
  created_at   timestamptz NOT NULL DEFAULT now()
);

-- An admitted request that ended with nothing billed (failed upstream, or nothing produced): its receipt.
-- Written in groups after the response is sent; billed requests need no row here (their receipt is the ledger).
CREATE TABLE unbilled_requests (
  id          bigserial PRIMARY KEY,
  account_id  text NOT NULL,
  request_id  text NOT NULL,
  key_id      text,
  route       text NOT NULL,
  model       text,
  outcome     text NOT NULL,
  started_at  timestamptz NOT NULL,
  ended_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX unbilled_requests_lookup ON unbilled_requests (account_id, request_id);
CREATE INDEX unbilled_requests_time ON unbilled_requests (ended_at);

-- A request's ledger entries by prefix: `<id>`, its parts `<id>#<seq>`, a reused id's `<id>~<nonce>`.
CREATE INDEX ledger_idem_prefix ON ledger (idem_key text_pattern_ops);

-- A batch line's request id (`batch_req_<nonce>`, as its output line names it) finds its line.
CREATE INDEX batch_lines_nonce ON batch_lines (nonce);

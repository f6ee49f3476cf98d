-- Ephemeral realtime client secrets (POST /alpha/v1/realtime/client_secrets): only a SHA-256 of the secret is
-- stored; it stands for its parent key (account, scopes, limits, revocation) until it expires, and opens
-- realtime sessions only. The session configuration it was minted with starts each session it opens.
CREATE TABLE realtime_secrets (
  secret_hash text PRIMARY KEY,
  key_id      text NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
  session     text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL
);
CREATE INDEX realtime_secrets_key ON realtime_secrets (key_id);
CREATE INDEX realtime_secrets_expiry ON realtime_secrets (expires_at);

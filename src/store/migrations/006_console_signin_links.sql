-- One-time console sign-in links the operator hands out (the embedded default prints one for its demo account
-- at first start): only a SHA-256 of the token is stored, and a link signs in once, before it expires.
CREATE TABLE console_signin_links (
  token_hash  text PRIMARY KEY,
  user_id     text NOT NULL REFERENCES console_users(id) ON DELETE CASCADE,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  used_at     timestamptz
);
CREATE INDEX console_signin_links_user ON console_signin_links (user_id);

-- The web console: people who log in (one per account), their sessions, and login attempts for rate limits.
CREATE TABLE console_users (
  id             text PRIMARY KEY,
  email          text NOT NULL UNIQUE,          -- lower-cased; equals accounts.email
  password_hash  text NOT NULL,                 -- argon2id, PHC-encoded (carries its own salt and parameters)
  account_id     text NOT NULL UNIQUE REFERENCES accounts(id),
  created_at     timestamptz NOT NULL DEFAULT now()
);

-- Only a SHA-256 of the session token is stored: a read of this table cannot be replayed as a cookie.
CREATE TABLE console_sessions (
  token_hash  text PRIMARY KEY,
  user_id     text NOT NULL REFERENCES console_users(id) ON DELETE CASCADE,
  csrf_token  text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- Failed log-ins and all sign-ups, counted per IP and per email over a sliding window; old rows are pruned.
CREATE TABLE console_attempts (
  id     bigserial PRIMARY KEY,
  kind   text NOT NULL CHECK (kind IN ('login', 'signup')),
  ip     text NOT NULL,
  email  text NOT NULL,
  at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_attempts_ip ON console_attempts (kind, ip, at);
CREATE INDEX console_attempts_email ON console_attempts (kind, email, at);

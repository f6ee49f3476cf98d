-- Console rate limits as atomic counters, one row per bucket and fixed window (the per-attempt log they replace
-- was read before and written after a password check, so concurrent guesses all passed), and the key that
-- signs known-device cookies.
DROP TABLE console_attempts;

CREATE TABLE console_throttle (
  bucket        text PRIMARY KEY,                -- kind:scope:subject, e.g. login:ip:203.0.113.7, login:acct:a@example.com
  window_start  timestamptz NOT NULL,
  hits          integer NOT NULL                 -- attempts counted in the window (a successful log-in gives its own back)
);
CREATE INDEX console_throttle_window ON console_throttle (window_start);

-- Server-side secrets shared by every instance on this store (created on first use).
CREATE TABLE console_secrets (
  name   text PRIMARY KEY,
  value  text NOT NULL
);

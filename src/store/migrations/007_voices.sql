-- Cloned voices and their samples, per account. Sample bytes live here so that every instance can read them.
-- A deleted voice keeps its row (deleted_at: the month's add counter still counts it) and loses its samples.
CREATE TABLE voices (
  id                 text PRIMARY KEY,
  account_id         text NOT NULL REFERENCES accounts(id),
  name               text NOT NULL,
  description        text,
  labels             jsonb NOT NULL DEFAULT '{}'::jsonb,
  model_id           text NOT NULL,
  upstream           text NOT NULL,
  upstream_voice_id  text NOT NULL,
  created_at         timestamptz NOT NULL DEFAULT now(),
  deleted_at         timestamptz
);
CREATE INDEX voices_account ON voices (account_id, created_at);

CREATE TABLE voice_samples (
  id             text PRIMARY KEY,
  voice_id       text NOT NULL REFERENCES voices(id),
  seq            integer NOT NULL,
  file_name      text NOT NULL,
  mime_type      text NOT NULL,
  size_bytes     bigint NOT NULL,
  hash           text NOT NULL,
  duration_secs  double precision,
  data           bytea NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX voice_samples_voice ON voice_samples (voice_id, seq);

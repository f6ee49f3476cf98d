-- Files (their bytes in chunks, so every instance reads them and none holds one whole), batches and their lines.
CREATE TABLE files (
  id          text PRIMARY KEY,
  account_id  text NOT NULL REFERENCES accounts(id),
  purpose     text NOT NULL,
  filename    text NOT NULL,
  bytes       bigint NOT NULL DEFAULT 0,
  -- 'uploading' until its last chunk is stored (never listed or read); a failed upload is deleted.
  status      text NOT NULL DEFAULT 'uploading' CHECK (status IN ('uploading', 'processed')),
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz
);
CREATE INDEX files_account ON files (account_id, created_at, id);

CREATE TABLE file_chunks (
  file_id  text NOT NULL REFERENCES files(id) ON DELETE CASCADE,
  seq      integer NOT NULL,
  data     bytea NOT NULL,
  PRIMARY KEY (file_id, seq)
);

CREATE TABLE batches (
  id                 text PRIMARY KEY,
  account_id         text NOT NULL REFERENCES accounts(id),
  key_id             text NOT NULL REFERENCES api_keys(id),
  endpoint           text NOT NULL,
  input_file_id      text NOT NULL,
  completion_window  text NOT NULL,
  status             text NOT NULL CHECK (status IN ('validating', 'failed', 'in_progress', 'finalizing', 'completed', 'expired', 'cancelling', 'cancelled')),
  model              text,
  metadata           jsonb,
  -- Request properties the gateway does not use, kept and returned as given.
  extra              jsonb NOT NULL DEFAULT '{}',
  errors             jsonb,
  output_file_id     text,
  error_file_id      text,
  created_at         timestamptz NOT NULL DEFAULT now(),
  expires_at         timestamptz NOT NULL,
  in_progress_at     timestamptz,
  finalizing_at      timestamptz,
  completed_at       timestamptz,
  failed_at          timestamptz,
  expired_at         timestamptz,
  cancelling_at      timestamptz,
  cancelled_at       timestamptz,
  total              integer NOT NULL DEFAULT 0,
  completed          integer NOT NULL DEFAULT 0,
  failed             integer NOT NULL DEFAULT 0,
  input_tokens       bigint NOT NULL DEFAULT 0,
  output_tokens      bigint NOT NULL DEFAULT 0,
  reasoning_tokens   bigint NOT NULL DEFAULT 0,
  -- Who validates or finalizes it now, until when (a dead owner's claim is taken over after it).
  lease_owner        text,
  lease_until        timestamptz
);
CREATE INDEX batches_account ON batches (account_id, created_at, id);
CREATE INDEX batches_open ON batches (status) WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling');

-- One request of a batch. `nonce` is fixed when the line is stored: every attempt of the line debits
-- under batch:<batch_id>:<custom_id> with it, so the ledger stores the line once however often it runs.
CREATE TABLE batch_lines (
  batch_id     text NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
  line_no      integer NOT NULL,
  custom_id    text NOT NULL,
  body         text NOT NULL,
  nonce        text NOT NULL,
  state        text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
  ok           boolean,
  -- The output line (JSON), written once: only while the line is still pending.
  output       text,
  lease_owner  text,
  lease_until  timestamptz,
  attempts     integer NOT NULL DEFAULT 0,
  PRIMARY KEY (batch_id, line_no),
  UNIQUE (batch_id, custom_id)
);
CREATE INDEX batch_lines_pending ON batch_lines (batch_id, line_no) WHERE state = 'pending';

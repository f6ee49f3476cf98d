-- Realtime client secrets join the change feed: every instance keeps the live ones in memory (their hash,
-- parent key and expiry), so a made-up secret is refused without a query. Secrets are never updated; a
-- new one gets the next change_seq value, and the feed reads those past the last it saw.
ALTER TABLE realtime_secrets ADD COLUMN version bigint NOT NULL DEFAULT nextval('change_seq');
CREATE INDEX realtime_secrets_version ON realtime_secrets (version);

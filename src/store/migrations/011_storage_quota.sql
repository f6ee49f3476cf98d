-- Storage a tenant can fill: voice samples are stored as files are (chunked, counted in one per-account
-- sum with the account's files), and files can expire (a sweep deletes them and their bytes).
ALTER TABLE files DROP CONSTRAINT files_status_check;
-- 'voice_sample': the bytes of a cloned voice's sample (never listed or read as a file).
ALTER TABLE files ADD CONSTRAINT files_status_check CHECK (status IN ('uploading', 'processed', 'voice_sample'));
CREATE INDEX files_expiring ON files (expires_at) WHERE expires_at IS NOT NULL;

ALTER TABLE voice_samples ADD COLUMN file_id text REFERENCES files(id);
INSERT INTO files (id, account_id, purpose, filename, bytes, status, created_at)
  SELECT 'file-vs' || s.id, v.account_id, 'voice_sample', s.file_name, s.size_bytes, 'voice_sample', s.created_at
    FROM voice_samples s JOIN voices v ON v.id = s.voice_id;
INSERT INTO file_chunks (file_id, seq, data) SELECT 'file-vs' || id, 0, data FROM voice_samples;
UPDATE voice_samples SET file_id = 'file-vs' || id;
ALTER TABLE voice_samples ALTER COLUMN file_id SET NOT NULL;
ALTER TABLE voice_samples DROP COLUMN data;

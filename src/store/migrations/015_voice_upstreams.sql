-- A cloned voice on every upstream of its model's pool (issue 27): the id each upstream gave it. A voice
-- cloned before pools has one copy, on the upstream its row names (voices.upstream, upstream_voice_id,
-- which keep naming the first copy).
CREATE TABLE voice_upstreams (
  voice_id           text NOT NULL REFERENCES voices(id),
  seq                integer NOT NULL,
  upstream           text NOT NULL,
  upstream_voice_id  text NOT NULL,
  PRIMARY KEY (voice_id, upstream)
);
INSERT INTO voice_upstreams (voice_id, seq, upstream, upstream_voice_id) SELECT id, 0, upstream, upstream_voice_id FROM voices;

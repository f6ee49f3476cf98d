-- A key's opt-in to model fallback (issue 27): when true, a request that names no `models` list may be
-- served by its model's configured `fallbacks` when the model's upstreams cannot serve it. Off by default:
-- another model changes what the user gets, so it is never silent.
ALTER TABLE api_keys ADD COLUMN fallback boolean NOT NULL DEFAULT false;

-- One index on the ledger's idem_key instead of two. 001's unique constraint indexed it by the database's
-- collation, and 013 added a second index by text pattern for the receipts' prefix search (`<id>`, `<id>#<seq>`,
-- `<id>~<nonce>`). A unique index by text pattern serves all three uses: its equality is byte-wise, which is
-- what equality is under any deterministic collation (a database's default always is), so it refuses the same
-- duplicates; `ON CONFLICT (idem_key)` takes it as its arbiter; and both `=` / `= ANY` and `LIKE 'prefix%'`
-- read it. Every ledger row then costs PostgreSQL one index insertion less in the group commit
-- (docs/benchmarks.md, "One index on the ledger's idem_key").
-- It is built inside the migration's transaction before the two go: on a large ledger, writes wait while it builds.
CREATE UNIQUE INDEX ledger_idem_key ON ledger (idem_key text_pattern_ops);
ALTER TABLE ledger DROP CONSTRAINT ledger_idem_key_key;
DROP INDEX ledger_idem_prefix;

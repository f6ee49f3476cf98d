-- The ledger's account and key ids are checked by the group commit's one statement (src/ledger/settle.ts), for
-- the whole group with one join, instead of by a foreign key per row. Each foreign key ran a locking lookup
-- per row (SELECT ... FOR KEY SHARE of the account or key), about a third of what PostgreSQL spent on a
-- ledger row (docs/benchmarks.md, "The ledger's references checked per group"). The settle statement is the
-- ledger's only writer, and accounts and keys are never deleted or renumbered (a key is revoked, not removed).
-- An entry naming an unknown account or key still fails as a foreign key would: SQLSTATE 23503, and the
-- committer isolates it and parks it while the rest of its group commits.
CREATE FUNCTION tollgate_unknown_ref(idem_key text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger entry % names an account or key the store does not have', idem_key
    USING ERRCODE = 'foreign_key_violation';
END $$;
ALTER TABLE ledger DROP CONSTRAINT ledger_account_id_fkey, DROP CONSTRAINT ledger_key_id_fkey;

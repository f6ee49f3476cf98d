// Applies migrations/*.sql in order, once each, recorded in schema_migrations.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Db } from './db.js';

const DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations');
/** Serialises concurrent starters (instances on one PostgreSQL) for the whole migration. */
const MIGRATION_LOCK = 727274;

export async function migrate(db: Db): Promise<void> {
  // Under the same lock as the migrations: two instances starting at once on a new database would
  // otherwise race on this CREATE (IF NOT EXISTS does not stop a concurrent duplicate).
  await db.tx(async (c) => {
    await c.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await c.query('CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())');
  });
  const files = readdirSync(DIR).filter((f) => f.endsWith('.sql')).sort();
  for (const name of files) {
    await db.tx(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      const done = await c.query('SELECT 1 FROM schema_migrations WHERE name = $1', [name]);
      if (done.rowCount) return;
      await c.query(readFileSync(join(DIR, name), 'utf8'));
      await c.query('INSERT INTO schema_migrations (name) VALUES ($1)', [name]);
    });
  }
}

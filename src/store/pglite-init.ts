// Creates an embedded PGlite data directory (initdb), applies the migrations to it, and exits. Run as a child
// process by openPglite: initdb's WASM memory (~600 MB) is never handed back to the OS by the process that
// ran it, and neither is what PostgreSQL's backend grows to while it runs the migrations' DDL (the gateway's
// first start on a new directory idled 161-166 MB when it migrated it itself, 143-147 on later starts).
import { dirname } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PGLITE_CONF } from './pglite-conf.js';
import { openPglite } from './db.js';

const dir = process.argv[2];
if (!dir) {
  process.stderr.write('usage: pglite-init.js DATA_DIR/pg\n');
  process.exit(2);
}
const created = await PGlite.create(dir, { postgresqlconf: PGLITE_CONF });
await created.close();
// The store as the gateway opens it (its thread, its socket, the migrations), now that the directory exists.
const db = await openPglite(dirname(dir));
await db.close();

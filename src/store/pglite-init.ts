// Creates an embedded PGlite data directory (initdb) and exits. Run as a child process by openPglite:
// initdb's WASM memory (~600 MB) is never handed back to the OS by the process that ran it.
import { PGlite } from '@electric-sql/pglite';
import { PGLITE_CONF } from './pglite-conf.js';

const dir = process.argv[2];
if (!dir) {
  process.stderr.write('usage: pglite-init.js DATA_DIR\n');
  process.exit(2);
}
const db = await PGlite.create(dir, { postgresqlconf: PGLITE_CONF });
await db.close();

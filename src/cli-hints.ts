// The commands the start-up banner and the CLI suggest, printed with the flags that reach the store the server uses.
import { relative, resolve, isAbsolute } from 'node:path';
import type { OpArgs } from './ops.js';

/** Where the CLI keeps an embedded store when told nothing: `--data-dir`, else TOLLGATE_DATA_DIR, else ./tollgate-data. */
export function dataDirOf(flags: OpArgs): string {
  return resolve(typeof flags.data_dir === 'string' ? flags.data_dir : process.env.TOLLGATE_DATA_DIR ?? './tollgate-data');
}

/** A word as a POSIX shell reads it back unchanged. */
function quoted(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/**
 * How to run this CLI from where the server was started (`node dist/cli.js` after `npm start`), and the
 * flags that reach its store: `--config` as it was given, or a data dir that is not the default.
 */
export function cliCommand(flags: OpArgs, store: { dataDir: string; embedded: boolean }): (args: string) => string {
  const script = process.argv[1] ?? 'dist/cli.js';
  const rel = relative(process.cwd(), script);
  const node = `node ${quoted(rel && !rel.startsWith('..') && !isAbsolute(rel) ? rel : script)}`;
  const tail = storeFlags(flags, store);
  return (args) => `${node} ${args}${tail}`;
}

/**
 * ` --config FILE` as it was given, and ` --data-dir DIR` when the store lives there (no PostgreSQL) and
 * it is not the dir the CLI would find by itself.
 */
export function storeFlags(flags: OpArgs, store: { dataDir: string; embedded: boolean }): string {
  const config = typeof flags.config === 'string' ? ` --config ${quoted(flags.config)}` : '';
  const usual = store.dataDir === resolve('./tollgate-data') && process.env.TOLLGATE_DATA_DIR === undefined;
  return config + (store.embedded && !usual ? ` --data-dir ${quoted(store.dataDir)}` : '');
}

// The command line's words and flags, apart from what the commands do (the tests' helper reads them too).
import { OpError, type OpArgs } from './ops.js';

export interface Parsed { positional: string[]; flags: OpArgs }

export function parseArgs(argv: string[]): Parsed {
  const positional: string[] = [];
  const flags: OpArgs = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith('--')) { positional.push(a); continue; }
    const eq = a.indexOf('=');
    const name = (eq > 0 ? a.slice(2, eq) : a.slice(2)).replace(/-/g, '_');
    if (eq > 0) flags[name] = a.slice(eq + 1);
    else if (name === 'json' || name === 'help') flags[name] = true;
    else { const v = argv[i + 1]; if (v === undefined) throw new OpError(`--${a.slice(2)} needs a value`); flags[name] = v; i++; }
  }
  return { positional, flags };
}

/** An operator command's arguments: the flags, with the positional account or key prefix named as runOp takes it. */
export function operatorArgs(command: string, positional: string[], flags: OpArgs): OpArgs {
  const args: OpArgs = { ...flags };
  if (['account credit', 'account show', 'account sign-in-link'].includes(command)) args.account_id = positional[0];
  if (command === 'key revoke' || command === 'key limits') args.prefix = positional[0];
  return args;
}

// The gateway's worker threads (the embedded store, password hashing) start here, with the Node
// options they inherit made safe for a thread whose entry is a file.
import { Worker, type WorkerOptions } from 'node:worker_threads';

/** A worker thread running `entry`, with the parent's Node options less those a file entry refuses. */
export function startThread(entry: URL, options: WorkerOptions = {}): Worker {
  // Given only when something must go: a thread given execArgv refuses process-wide options in it
  // (Node 24 under its test runner: ERR_WORKER_INVALID_EXEC_ARGV), which it ignores when it inherits them.
  const execArgv = threadExecArgv(process.execArgv);
  return new Worker(entry, execArgv.length === process.execArgv.length ? options : { execArgv, ...options });
}

/**
 * The parent's Node options less `--input-type`: that option is for string input only, and a thread
 * whose entry is a file fails to load under it (ERR_INPUT_TYPE_NOT_ALLOWED). Without this, a gateway
 * opened from `node --input-type=module -e ...` had no embedded store and could hash no password.
 */
export function threadExecArgv(execArgv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const a = execArgv[i]!;
    if (a.startsWith('--input-type=')) continue;
    if (a === '--input-type') { i++; continue; }
    out.push(a);
  }
  return out;
}

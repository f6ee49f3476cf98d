// The gateway's worker threads (the embedded store, password hashing) start here, each inheriting the
// parent's Node options as they are, and each keeping V8's memory reducer able to run on its own isolate.
import { Worker, type WorkerOptions } from 'node:worker_threads';

const HEAP = new URL('./server/heap.js', import.meta.url).href;

/**
 * A worker thread running the module `entry`. The thread's own code only imports it, so the thread
 * inherits every Node and V8 option of the parent: a thread whose entry is a file fails to load under
 * `--input-type` (ERR_INPUT_TYPE_NOT_ALLOWED: that option is for string input, and `node --input-type=module
 * -e ...` had no embedded store and could hash no password), and one given its own `execArgv` to leave it
 * out refuses any process-wide option in them (ERR_WORKER_INVALID_EXEC_ARGV: `--max-old-space-size=512`,
 * `--allow-natives-syntax`). A failed import is thrown as an uncaught exception, so it reaches the
 * Worker's `error` event whatever `--unhandled-rejections` says. The thread's isolate has a memory reducer of its
 * own, which needs the same nudge as the main one (server/heap.ts, keepMemoryReducerAwake).
 */
export function startThread(entry: URL, options: WorkerOptions = {}): Worker {
  const code = `Promise.all([import(${JSON.stringify(HEAP)}).then((m) => m.keepMemoryReducerAwake()), import(${JSON.stringify(entry.href)})])
    .catch((e) => process.nextTick(() => { throw e; }));`;
  return new Worker(code, { ...options, eval: true });
}

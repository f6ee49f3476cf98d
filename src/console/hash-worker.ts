// Worker thread for argon2id: hashing takes ~80 ms of CPU and must not stall the proxy's event loop.
import { parentPort } from 'node:worker_threads';
import { randomBytes } from 'node:crypto';
import { argon2id, argon2Verify } from 'hash-wasm';

export type HashRequest = { op: 'hash'; password: string } | { op: 'verify'; password: string; hash: string };
export type HashJob = HashRequest & { id: number };
export type HashReply = { id: number; result?: string | boolean; error?: string };

// OWASP's argon2id baseline: 19 MiB, 2 passes, 1 lane.
const PARAMS = { parallelism: 1, iterations: 2, memorySize: 19_456, hashLength: 32 } as const;

parentPort?.on('message', async (job: HashJob) => {
  try {
    const result = job.op === 'hash'
      ? await argon2id({ ...PARAMS, password: job.password, salt: randomBytes(16), outputType: 'encoded' })
      : await argon2Verify({ password: job.password, hash: job.hash });
    parentPort!.postMessage({ id: job.id, result } satisfies HashReply);
  } catch (e) {
    parentPort!.postMessage({ id: job.id, error: String(e) } satisfies HashReply);
  }
});

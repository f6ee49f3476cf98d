// Password hashing (argon2id, random salt, PHC-encoded) on one lazily started worker thread.
import type { Worker } from 'node:worker_threads';
import { startThread } from '../threads.js';
import type { HashJob, HashReply, HashRequest } from './hash-worker.js';

type Pending = { resolve: (v: string | boolean) => void; reject: (e: Error) => void };

let worker: Worker | null = null;
let nextId = 1;
const pending = new Map<number, Pending>();

function start(): Worker {
  const w = startThread(new URL('./hash-worker.js', import.meta.url));
  w.on('message', (m: HashReply) => {
    const p = pending.get(m.id);
    if (!p) return;
    pending.delete(m.id);
    if (m.error !== undefined || m.result === undefined) p.reject(new Error(m.error ?? 'no result'));
    else p.resolve(m.result);
    if (pending.size === 0) w.unref();
  });
  w.on('error', (e) => fail(w, e));
  w.on('exit', (code) => fail(w, new Error(`password worker exited with ${code}`)));
  return w;
}

function fail(w: Worker, e: Error): void {
  if (worker === w) worker = null;
  for (const p of pending.values()) p.reject(e);
  pending.clear();
}

function run(job: HashRequest): Promise<string | boolean> {
  worker ??= start();
  const w = worker;
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    w.ref(); // keep the process up while a hash is owed; unref'd again when idle so shutdown is not held
    w.postMessage({ ...job, id } as HashJob);
  });
}

export async function hashPassword(password: string): Promise<string> {
  return (await run({ op: 'hash', password })) as string;
}

export async function verifyPassword(password: string, hash: string): Promise<boolean> {
  return (await run({ op: 'verify', password, hash })) === true;
}

// Verified against when no user has the email, so that a miss costs as long as a wrong password.
let dummy: Promise<string> | null = null;
export async function burnVerify(password: string): Promise<void> {
  dummy ??= hashPassword('tollgate-no-such-user');
  await verifyPassword(password, await dummy);
}

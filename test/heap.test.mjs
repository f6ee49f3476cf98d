// The heap policy of `serve`: heap growth is capped while the live heap is large (many open streams)
// and handed back to V8 once it is small again; an operator's own heap flags switch it off. And once the
// gateway is quiet, V8's memory reducer gives memory back, on Node 24 too.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGateway, nodeBinary } from './helpers/gateway.mjs';

const run = promisify(execFile);
const HEAP = fileURLToPath(new URL('../dist/server/heap.js', import.meta.url));

// Runs in a child so the V8 flag it sets does not leak into the test runner.
const SCRIPT = `
const { boundHeapGrowth } = await import(${JSON.stringify(HEAP)});
const tick = () => new Promise((r) => setTimeout(r, 50));
const policy = boundHeapGrowth();
if (!policy) { console.log(JSON.stringify({ policy: null })); process.exit(0); }
const seen = [policy.capped];
let live = Array.from({ length: 600_000 }, (_, i) => ({ i, s: 'stream ' + i }));  // ~60 MB kept alive
gc(); await tick();
seen.push(policy.capped);
live = null;
gc(); await tick();
seen.push(policy.capped);
policy.stop();
console.log(JSON.stringify({ policy: 'on', seen }));
`;

async function child(flags) {
  const { stdout } = await run(process.execPath, [...flags, '--expose-gc', '--input-type=module', '-e', SCRIPT], { env: { ...process.env, NODE_OPTIONS: '' } });
  return JSON.parse(stdout.trim().split('\n').at(-1));
}

test('heap growth is capped once a major GC leaves a large live heap, and uncapped when it is small again', async () => {
  assert.deepEqual(await child([]), { policy: 'on', seen: [false, true, false] });
});

test("an operator's own heap sizing turns the policy off", async () => {
  assert.deepEqual(await child(['--max-old-space-size=512']), { policy: null });
  assert.deepEqual(await child(['--heap-growing-percent=50']), { policy: null });
});

// V8 13 (Node 24) reads a zero rate of allocation on the embedder's C++ heap as a high one, so without the
// nudge (server/heap.ts, keepMemoryReducerAwake) its memory reducer never starts: only a watchdog does, 100 s
// after the last major GC. `--trace-gc` names each GC's isolate and marks the reducer's as "(reduce)".
test('on Node 24 a quiet gateway gets its memory back: V8\'s memory reducer runs on the gateway\'s isolate and on its store thread\'s within a minute of start', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', node: nodeBinary(24), nodeArgs: ['--trace-gc'] });
  const reduced = () => new Set([...gw.output.stdout.matchAll(/\[\d+:(0x[0-9a-f]+)\]\s+[\d.]+ ms: Mark-Compact \(reduce\)/g)].map((m) => m[1]));
  for (let waited = 0; reduced().size < 2 && waited < 60_000; waited += 500) await sleep(500);
  assert.equal(reduced().size, 2, `memory-reducing GCs on two isolates (the gateway, the store's thread); the GCs seen:\n${gw.output.stdout.split('\n').filter((l) => l.includes(' ms: ')).join('\n')}`);
});

// An experiment for a lead, not what Tollgate runs: the admission and settle scripts of
// src/gate/limits/redis.ts as built (dist, or --dist DIR) (EVALSHA, the shared Lua library defined again on every call)
// against the same code loaded once as a Redis Functions library (FCALL, Redis 7), one request at a time
// with realistic arguments. Prints script µs per request (INFO commandstats) and redis-server CPU per
// request (/proc), alternating the two ways.
// `node bench/redis-functions.mjs [--requests N] [--pairs P] [--open K] [--dist DIR]`
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import { ROOT, usage } from './lib.mjs';

const args = process.argv.slice(2);
const opt = (n, d) => (args.includes(n) ? args[args.indexOf(n) + 1] : d);
const N = Number(opt('--requests', '3000'));
const PAIRS = Number(opt('--pairs', '3'));
const OPEN = Number(opt('--open', '8'));

const DIST = resolve(opt('--dist', join(ROOT, 'dist')));
const { SCRIPTS, functionsLibrary, packSettles } = await import(pathToFileURL(join(DIST, 'gate/limits/redis.js')).href);
const tag = randomBytes(4).toString('hex');
// The limiter's own library and script texts, under this run's names (so a gateway's library is not touched).
const lib = functionsLibrary(tag, 'tgbench', 'tgb');

const r = new Redis(process.env.TOLLGATE_BENCH_REDIS ?? 'redis://127.0.0.1:6379');
await r.call('FUNCTION', 'LOAD', lib.library);
const sha = {
  admit: await r.script('LOAD', SCRIPTS.admit.lua), peek: await r.script('LOAD', SCRIPTS.peek.lua), committed: await r.script('LOAD', SCRIPTS.committed.lua),
};
const redisPid = Number(/process_id:(\d+)/.exec(await r.info('server'))?.[1] ?? 0);
const month = new Date().toISOString().slice(0, 7) + '-01';
const owner = 'ibench';

function keysOf(p) { return [`${p}:holdsum`, `${p}:holds`, `${p}:holdexp`, `${p}:run`, `${p}:pend`]; }
const admitArgs = (id) => [owner, id, 'key_0123456789abcdef', '4100', '1000000000', '1000000', '1', '100000000000000', '17', '',
  `sm:key_0123456789abcdef`, month, '0', '3', '180000', '', ''];
const entry = (id) => JSON.stringify({ idemKey: id, nonce: 'n0123456789abcdef', accountId: 'acct_0123456789abcdef', keyId: 'key_0123456789abcdef', kind: 'debit',
  amount: '4075', reason: 'usage', model: 'sim-chat', usage: { input_tokens: 14, output_tokens: 16, prices: { input_per_mtok: '0.30', output_per_mtok: '2.50' },
    started_at: new Date().toISOString(), upstream: 'sim', route: '/v1/chat/completions' }, at: new Date().toISOString() });

async function run(way, n) {
  const p = `tgbench:${tag}:${way}:{acct}`;
  const keys = keysOf(p);
  const call = (name, ...a) => (way === 'fcall' ? r.call('FCALL', lib.name(name), SCRIPTS[name].keys, ...a) : r.evalsha(sha[name], SCRIPTS[name].keys, ...a));
  for (let k = 0; k < OPEN; k++) await call('admit', ...keys, ...admitArgs(`open${k}`));
  const one = async (i) => {
    const id = `chatcmpl-${i}`;
    await call('admit', ...keys, ...admitArgs(id));
    // The settle: its record pushed onto the account's queue as the limiter packs it, then applied by the next
    // script on the account (here peek, the lightest).
    await r.rpush(`${p}:setq`, packSettles(owner, [[id, { id, accountId: 'acct', keyId: 'key_0123456789abcdef', amount: 4075n, entry: entry(id) }, true, 4075n, '', '']]));
    await call('peek', keys[0], keys[1], '');
    if (i % 50 === 49) await call('committed', keys[0], keys[4], keys[1], '50', ...Array.from({ length: 50 }, (_, j) => `chatcmpl-${i - j}`), '', '', '0');
  };
  for (let i = 0; i < 300; i++) await one(i);
  await r.config('RESETSTAT');
  const cpu0 = usage(redisPid).cpu;
  for (let i = 300; i < 300 + n; i++) await one(i);
  const cpu = usage(redisPid).cpu - cpu0;
  const stats = await r.info('commandstats');
  const m = new RegExp(`cmdstat_${way === 'fcall' ? 'fcall' : 'evalsha'}:calls=(\\d+),usec=(\\d+)`).exec(stats);
  await r.del(...keys, `${p}:rpm:key_0123456789abcdef`, `${p}:setq`);
  return { way, script_us_per_request: +(Number(m[2]) / n).toFixed(1), redis_server_cpu_us_per_request: +(cpu * 1e6 / n).toFixed(1) };
}

const out = [];
for (let i = 0; i < PAIRS; i++) for (const way of i % 2 ? ['fcall', 'evalsha'] : ['evalsha', 'fcall']) out.push(await run(way, N));
console.log(JSON.stringify({ requests: N, open: OPEN, runs: out }));
await r.call('FUNCTION', 'DELETE', lib.libraryName);
r.disconnect();

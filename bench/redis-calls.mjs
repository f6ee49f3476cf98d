// What Redis spends on one request when each script call carries one request (the steady-rate case):
// the Redis limiter's admission, then its final settle, then the commit record, one request at a time.
// Reads Redis's own accounting (INFO commandstats): script time per request, and the commands run inside
// the scripts per request; and redis-server's CPU per request (/proc, when Redis runs on this machine).
// `node bench/redis-calls.mjs [--dist DIR] [--requests N] [--ceiling] [--open K] [--rounds R] [--split]` (after npm run build).
// --split: each round admits its N requests, then settles them, then commits them, and reports the script time of
// one admission, the RPUSH of one settle (the call on a response's path) and the settle's bookkeeping (applied from
// the account's settle queue by the next script on the account), apart. Before 2026-11-29 a settle was one script
// call doing both, reported as settle_script_us.
// --turn K: as at a steady rate with spare holds, where each admission call carries a few requests and each settle
// is an RPUSH of its own: rounds of K admissions in one call, then their K settles each recorded apart, applied
// by the next round's admission call; reports the script time per call and per request (admission + settle).
// --dist: another build's dist/ (an A/B: run it alternating with this one). --ceiling: the key has a spend ceiling.
// --open K: K other holds of the account stay open throughout (requests of other clients in flight, as at
// a steady rate; with none, the account's hold records are emptied by every settle and made again by the next admission).
import { resolve, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import { ROOT, usage } from './lib.mjs';
import { clearRedisPrefix } from '../test/helpers/gateway.mjs';

const args = process.argv.slice(2);
const opt = (n, d) => (args.includes(n) ? args[args.indexOf(n) + 1] : d);
const DIST = resolve(opt('--dist', join(ROOT, 'dist')));
const N = Number(opt('--requests', '5000'));
const ROUNDS = Number(opt('--rounds', '2'));
const CEILING = args.includes('--ceiling');
const OPEN = Number(opt('--open', '0'));
const SPLIT = args.includes('--split');
const TURN = Number(opt('--turn', '0'));
const URL_ = process.env.TOLLGATE_BENCH_REDIS ?? 'redis://127.0.0.1:6379';

const { RedisLimiter } = await import(pathToFileURL(join(DIST, 'gate/limits/redis.js')).href);
const prefix = `tgbench:${randomBytes(4).toString('hex')}:`;
const limiter = new RedisLimiter(URL_, prefix);
await limiter.ready();
const admin = new Redis(URL_);
const month = new Date().toISOString().slice(0, 7) + '-01';

const admit = (holdId) => limiter.admit({ holdId, accountId: 'acct', keyId: 'key', rpm: 1e9, concurrency: 1e6, money: true, hold: 50_000n,
  balance: { amount: 10n ** 14n, version: 1n }, ceiling: CEILING ? 10n ** 13n : null,
  spent: { period: 'month', start: month, amount: 0n, version: 1n }, ttlMs: 60_000 });

const debit = (holdId) => ({ id: holdId, accountId: 'acct', keyId: 'key', amount: 12_345n, entry: `{"idemKey":"${holdId}"}` });

async function one(i) {
  const holdId = `h${i}`;
  const out = await admit(holdId);
  if (!out.ok) throw new Error(`refused: ${out.reason}`);
  await limiter.settle(holdId, debit(holdId), true);
  // Committed at once here (the gateway's group commit carries ~100 at a time: its share is small).
  if (i % 50 === 49) {
    const ids = Array.from({ length: 50 }, (_, j) => `h${i - j}`);
    await limiter.committed('acct', ids, { balance: null, spends: [] });
  }
}

function stats(text) {
  const out = {};
  for (const m of text.matchAll(/cmdstat_([a-z|]+):calls=(\d+),usec=(\d+)/g)) out[m[1]] = { calls: Number(m[2]), usec: Number(m[3]) };
  return out;
}

/** The script calls in commandstats: by FCALL where the Functions library is loaded, else by EVALSHA. */
function scripts(s) {
  return ['evalsha', 'fcall'].map((c) => s[c] ?? { calls: 0, usec: 0 }).reduce((a, b) => ({ calls: a.calls + b.calls, usec: a.usec + b.usec }));
}

/** Script time per call since the last RESETSTAT. */
async function usPerCall() {
  const ev = scripts(stats(await admin.info('commandstats')));
  return ev.usec / Math.max(1, ev.calls);
}

/** --split: a round's admissions, then its settles, each timed apart. */
async function split(from) {
  const ids = Array.from({ length: N }, (_, j) => `h${from + j}`);
  await admin.config('RESETSTAT');
  for (const id of ids) { const out = await admit(id); if (!out.ok) throw new Error(`refused: ${out.reason}`); }
  const admitUs = await usPerCall();
  // A settle is an RPUSH onto the account's settle queue; its bookkeeping runs in the next script on the account
  // (here one peek, openHolds, applying the round's N): the script time per settle is that call's over N.
  await admin.config('RESETSTAT');
  for (const id of ids) await limiter.settle(id, debit(id), true);
  const push = stats(await admin.info('commandstats')).rpush ?? { calls: 0, usec: 0 };
  await limiter.openHolds('acct');
  const applied = scripts(stats(await admin.info('commandstats')));
  await limiter.committed('acct', ids, { balance: null, spends: [] });
  return { admission_script_us: +admitUs.toFixed(2), settle_rpush_us: +(push.usec / Math.max(1, push.calls)).toFixed(2),
    settle_bookkeeping_us: +(applied.usec / N).toFixed(2) };
}

/** --turn: N requests in calls of TURN admissions, each call also applying the TURN settles queued before it. */
async function turns(from) {
  let i = from;
  const batch = async () => {
    const ids = Array.from({ length: TURN }, () => `h${i++}`);
    const outs = await Promise.all(ids.map(admit)); // one turn: one admission call
    if (outs.some((o) => !o.ok)) throw new Error('refused');
    for (const id of ids) await limiter.settle(id, debit(id), true); // one queue entry each
    return ids;
  };
  await batch();
  await admin.config('RESETSTAT');
  const calls = Math.ceil(N / TURN);
  let done = [];
  for (let c = 0; c < calls; c++) {
    done.push(...await batch());
    if (done.length >= 500) { await limiter.committed('acct', done, { balance: null, spends: [] }); done = []; }
  }
  const ev = scripts(stats(await admin.info('commandstats')));
  return { script_us_per_call: +(ev.usec / ev.calls).toFixed(1), script_us_per_request: +(ev.usec / (calls * TURN)).toFixed(1) };
}

for (let k = 0; k < OPEN; k++) await admit(`open${k}`);
const rounds = [];
if (TURN > 0) {
  for (let r = 0; r < ROUNDS; r++) rounds.push(await turns(r * 10 * N));
} else if (SPLIT) {
  await split(0); // warm
  for (let r = 0; r < ROUNDS; r++) rounds.push(await split((r + 1) * N));
} else {
  const redisPid = Number(/process_id:(\d+)/.exec(await admin.info('server'))?.[1] ?? 0);
  let i = 0;
  for (let r = 0; r < ROUNDS; r++) {
    for (const end = i + 500; i < end; i++) await one(i); // warm
    await admin.config('RESETSTAT');
    const cpu0 = redisPid ? usage(redisPid).cpu : 0;
    for (const end = i + N; i < end; i++) await one(i);
    const cpu = redisPid ? usage(redisPid).cpu - cpu0 : NaN;
    const s = stats(await admin.info('commandstats'));
    const ev = scripts(s);
    const inner = Object.entries(s).filter(([c]) => !['evalsha', 'fcall', 'eval', 'info', 'config|resetstat', 'sadd', 'ping'].includes(c) && !c.startsWith('function'));
    rounds.push({
      redis_us_per_request: +(ev.usec / N).toFixed(2),
      redis_server_cpu_us_per_request: +(cpu * 1e6 / N).toFixed(1),
      script_calls_per_request: +(ev.calls / N).toFixed(2),
      inner_commands_per_request: +(inner.reduce((a, [, v]) => a + v.calls, 0) / N).toFixed(2),
      by_command: Object.fromEntries(inner.map(([c, v]) => [c, +(v.calls / N).toFixed(2)]).sort((a, b) => b[1] - a[1])),
    });
  }
}
console.log(JSON.stringify({ dist: DIST, requests: N, ceiling: CEILING, open: OPEN, ...(SPLIT ? { split: true } : {}), ...(TURN ? { turn: TURN } : {}), rounds }));

await clearRedisPrefix(prefix, URL_);
await limiter.close();
admin.disconnect();

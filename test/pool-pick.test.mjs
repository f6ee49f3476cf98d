// Upstream pools in process (issue 27): the pick (weights, priority, limits, health), the retry rule for streamed bodies, and the config.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chatBody } from './helpers/gateway.mjs';
import { refusedUrl } from './helpers/stub-upstream.mjs';
import { startSim } from '../dist/sim/index.js';
import { Upstreams } from '../dist/proxy/upstream.js';
import { Pools } from '../dist/proxy/pool.js';
import { embeddedConfig, loadConfigFile } from '../dist/config.js';

const chat = (id, upstream, extra = {}) => ({ id, upstream, upstream_model: 'sim-chat', kind: 'chat', input_per_mtok: '0.30', output_per_mtok: '2.50', max_output_tokens: 4096, ...extra });

test('a streamed request body is never sent twice: a refused connection is not retried on the next upstream', async (t) => {
  const sim = await startSim();
  t.after(() => sim.close());
  const base = embeddedConfig();
  const mk = (name, url) => ({ ...base.upstreams.get('sim'), name, baseUrl: url, sim: undefined });
  const ups = new Upstreams(new Map([['dead', mk('dead', await refusedUrl())], ['live', mk('live', sim.url)]]), new Map(), 3);
  t.after(() => ups.close());
  const pool = [{ name: 'dead', weight: 1, priority: 0, upstreamModel: 'sim-chat' }, { name: 'live', weight: 1, priority: 1, upstreamModel: 'sim-chat' }];
  const json = Buffer.from(chatBody());
  const headers = { 'content-type': 'application/json' };
  // A body in memory is sent again to the next upstream.
  const ok = ups.route({ pool, method: 'POST', path: '/v1/chat/completions', headers, body: () => json, requestId: 'r1' });
  assert.equal((await ok.response).statusCode, 200);
  assert.equal(ok.entry.name, 'live');
  ok.finish();
  const { Readable } = await import('node:stream');
  const streamed = ups.route({ pool, method: 'POST', path: '/v1/chat/completions', headers, body: () => ({ length: json.length, stream: Readable.from([json]) }), requestId: 'r2' });
  await assert.rejects(streamed.response, { code: 'upstream_unavailable' });
  assert.equal(sim.stats().requests, 1, 'the streamed body went to one upstream only');
});

test('config: `upstream` is a name or a pool of names and {name, weight, priority, upstream_model}; each known, once, and alike', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-config-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const upstreams = { a: { base_url: 'http://127.0.0.1:1' }, b: { base_url: 'http://127.0.0.1:2', max_concurrency: 4, rpm: 60 }, s: { sim: {} } };
  const load = (model) => {
    const path = join(dir, 'c.json');
    writeFileSync(path, JSON.stringify({ upstreams, models: [model], payments: { provider: 'sandbox', allow_sandbox: true } }));
    return loadConfigFile(path, {});
  };
  const one = load(chat('c', 'a'));
  assert.equal(one.models[0].upstream, 'a');
  assert.deepEqual(one.models[0].pool, [{ name: 'a', weight: 1, priority: 0, upstreamModel: 'sim-chat' }], 'one name is a pool of one, as before');
  const two = load(chat('c', ['a', { name: 'b', weight: 3, priority: 1, upstream_model: 'other' }]));
  assert.deepEqual(two.models[0].pool, [{ name: 'a', weight: 1, priority: 0, upstreamModel: 'sim-chat' }, { name: 'b', weight: 3, priority: 1, upstreamModel: 'other' }]);
  assert.equal(two.upstreams.get('b').maxConcurrency, 4);
  assert.equal(two.upstreams.get('b').rpm, 60);
  assert.deepEqual(two.upstreams.get('a').health, { ejectAfter: 3, ejectMs: 5000, maxEjectMs: 60_000, probePath: '/v1/models', probeIntervalMs: 10_000 });
  assert.equal(two.routing.maxAttempts, 3);
  assert.throws(() => load(chat('c', ['a', 'x'])), /\/models\/0\/upstream\/1: no upstream named "x"/);
  assert.throws(() => load(chat('c', ['a', 'a'])), /listed twice/);
  assert.throws(() => load(chat('c', ['a', 's'])), /\/models\/0\/upstream\/1: upstream "s" differs from "a" in continuous_usage_stats/);
  assert.ok(load({ id: 't', kind: 'tts', per_mchar: '1', voice_cloning: true, upstream: ['a', 'b'] }), 'a voice-cloning tts model may be pooled (each voice is cloned on every upstream)');
  assert.ok(load({ id: 't', kind: 'sts', audio_in_per_minute: '1', upstream: ['a', 'b'] }), 'a sts model may be pooled');
  assert.ok(load({ id: 't', kind: 'tts', per_mchar: '1', upstream: ['a', 'b'] }), 'a tts model without cloning may be pooled');
  for (const kind of [{ kind: 'tts', per_mchar: '1' }, { kind: 'stt', audio_in_per_minute: '1' }, { kind: 'sts', audio_in_per_minute: '1' }]) {
    const m = load({ id: 't', ...kind, upstream_model: 'base', upstream: ['a', { name: 'b', upstream_model: 'x' }] }).models.find((x) => x.id === 't');
    assert.deepEqual(m.pool.map((e) => e.upstreamModel), ['base', 'x'], `a ${kind.kind} model names its model per upstream`);
  }
});

test('config: an upstream\'s base_url is its server\'s root; one ending in /v1 (every request would go to /v1/v1/...) is refused by name, as is one that is no URL', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-config-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const load = (baseUrl) => {
    const path = join(dir, 'c.json');
    writeFileSync(path, JSON.stringify({ upstreams: { a: { base_url: baseUrl } }, models: [chat('c', 'a')], payments: { provider: 'sandbox', allow_sandbox: true } }));
    return loadConfigFile(path, {});
  };
  assert.throws(() => load('http://10.0.0.1:8000/v1'), /\/upstreams\/a\/base_url: "http:\/\/10.0.0.1:8000\/v1" ends in \/v1: give the server's root \(http:\/\/10.0.0.1:8000\)/);
  assert.throws(() => load('https://gw.example.com/openai/v1/'), /ends in \/v1: give the server's root \(https:\/\/gw.example.com\/openai\)/);
  assert.throws(() => load('http://[::1'), /\/upstreams\/a\/base_url: "http:\/\/\[::1" is not a URL/);
  for (const ok of ['http://10.0.0.1:8000', 'https://api.elevenlabs.io/', 'https://gw.example.com/openai', 'https://h/v1beta', 'https://h/deployments/x?api-version=1']) {
    assert.ok(load(ok).upstreams.get('a'), ok);
  }
});

test('the pick: spread by weight, least in-flight first, a lower priority only while the better ones are ejected or full, ejections grow and a trial readmits', async () => {
  const base = embeddedConfig().upstreams.get('sim');
  let now = 1_000_000;
  const cfg = (name, extra = {}) => [name, { ...base, name, ...extra, health: { ...base.health, ejectAfter: 2, ejectMs: 1000, maxEjectMs: 3000, ...extra.health } }];
  const pools = new Pools(new Map([cfg('a'), cfg('b'), cfg('c', { maxConcurrency: 1, queueMs: 0 }), cfg('r', { rpm: 2, queueMs: 0 })]), () => now);
  const e = (name, weight = 1, priority = 0) => ({ name, weight, priority, upstreamModel: 'm' });
  const pick = async (pool) => pools.acquire(pool, new Set(), Infinity, () => false);
  // Weights 3:1 at equal load: 3 of every 4.
  const counts = { a: 0, b: 0 };
  for (let i = 0; i < 400; i++) { const l = await pick([e('a', 3), e('b', 1)]); counts[l.entry.name]++; l.release(); }
  assert.deepEqual(counts, { a: 300, b: 100 });
  // Least in-flight among equals: with two held on a, the next goes to b.
  const held = [await pick([e('a'), e('b')]), await pick([e('a'), e('b')])];
  assert.deepEqual(held.map((l) => l.entry.name).sort(), ['a', 'b']);
  const extra = await pick([e('a'), e('b')]);
  const next = await pick([e('a'), e('b')]);
  assert.notEqual(next.entry.name, extra.entry.name, 'the less loaded one');
  for (const l of [...held, extra, next]) l.release();
  // Priority: c (best) while it has room; full, the next priority; never the lower one while c is free.
  const onC = await pick([e('c', 1, 0), e('a', 1, 1)]);
  assert.equal(onC.entry.name, 'c');
  assert.equal((await pick([e('c', 1, 0), e('a', 1, 1)])).entry.name, 'a', 'c is full: spilled');
  await assert.rejects(pick([e('c')]), (err) => err.code === 'upstream_busy' && Number(err.headers['retry-after']) >= 1);
  onC.release();
  // Passive health: two failures eject a for 1 s (b takes everything), then one trial; a failed trial doubles the ejection.
  for (let i = 0; i < 2; i++) { const l = await pick([e('a', 1, 0), e('b', 1, 1)]); assert.equal(l.entry.name, 'a'); l.failed(); l.release(); }
  assert.equal(pools.health().find((h) => h.name === 'a').healthy, false);
  assert.equal((await pick([e('a', 1, 0), e('b', 1, 1)])).entry.name, 'b');
  now += 1000;
  const trial = await pick([e('a', 1, 0), e('b', 1, 1)]);
  assert.equal(trial.entry.name, 'a', 'the trial');
  assert.equal((await pick([e('a', 1, 0), e('b', 1, 1)])).entry.name, 'b', 'one trial at a time');
  trial.failed(); trial.release();
  now += 1999;
  assert.equal((await pick([e('a', 1, 0), e('b', 1, 1)])).entry.name, 'b', 'ejected for twice as long');
  now += 1;
  const second = await pick([e('a', 1, 0), e('b', 1, 1)]);
  assert.equal(second.entry.name, 'a');
  second.ok(); second.release();
  assert.equal(pools.health().find((h) => h.name === 'a').healthy, true, 'an answered trial readmits it');
  // rpm: two starts in a minute, the third refused until the first is a minute old.
  for (let i = 0; i < 2; i++) { (await pick([e('r')])).release(); now += 10_000; }
  await assert.rejects(pick([e('r')]), (err) => err.code === 'upstream_busy' && err.headers['retry-after'] === '40');
  now += 40_000;
  (await pick([e('r')])).release();
  // A Retry-After pause longer than the queue's wait: refused at once, Retry-After saying when it ends.
  const paused = await pick([e('a')]);
  paused.pause(30_000); paused.ok(); paused.release();
  const t0 = Date.now();
  await assert.rejects(pick([e('a')]), (err) => err.code === 'upstream_busy' && err.headers['retry-after'] === '30');
  assert.ok(Date.now() - t0 < 500, 'without waiting in the queue');
  now += 30_000;
  // Every upstream ejected: the one back soonest is still tried.
  for (const n of ['a', 'b']) for (let i = 0; i < 2; i++) { const l = await pick([e(n)]); l.failed(); l.release(); }
  assert.ok(['a', 'b'].includes((await pick([e('a'), e('b')])).entry.name));
});

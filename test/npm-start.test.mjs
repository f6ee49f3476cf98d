// `npm start` builds only when a source is newer than the last build: the package's own scripts, run in a scratch copy.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { ROOT, nodeBinary } from './helpers/gateway.mjs';

/**
 * A scratch copy of the package's scripts: package.json, empty lock and tsconfig, `src/` with `sources`, and
 * `dist/` with `built`, every source dated a minute back and `dist/.built` now (a build newer than its sources).
 */
function scratch(t, name, sources, built) {
  const dir = mkdtempSync(join(tmpdir(), name));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  copyFileSync(join(ROOT, 'package.json'), join(dir, 'package.json'));
  for (const f of ['package-lock.json', 'tsconfig.json']) writeFileSync(join(dir, f), '{}');
  for (const d of ['src', 'dist', 'node_modules']) mkdirSync(join(dir, d));
  for (const [f, text] of Object.entries(sources)) writeFileSync(join(dir, 'src', f), text);
  for (const [f, text] of Object.entries(built)) writeFileSync(join(dir, 'dist', f), text);
  const past = new Date(Date.now() - 60_000);
  for (const f of ['package.json', 'package-lock.json', 'tsconfig.json', 'src', ...Object.keys(sources).map((f) => join('src', f))]) utimesSync(join(dir, f), past, past);
  writeFileSync(join(dir, 'dist', '.built'), '');
  return dir;
}

/** `npm start` in a scratch copy, with `env` over this process's; what its stand-in dist/cli.js printed last, as JSON. */
function npmStart(dir, env) {
  const r = spawnSync('npm', ['start', '--silent'], { cwd: dir, encoding: 'utf8', env: { ...process.env, ...env } });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').at(-1));
}

test('npm start\'s build step leaves dist alone when nothing changed since the last build, and rebuilds when a source is newer', (t) => {
  const dir = scratch(t, 'tollgate-start-', { 'cli.ts': '' }, { kept: 'built earlier' });
  const step = () => spawnSync('npm', ['run', '--silent', 'build:if-stale'], { cwd: dir, encoding: 'utf8' });
  const same = step();
  assert.equal(same.status, 0, same.stderr);
  assert.ok(existsSync(join(dir, 'dist', 'kept')), 'nothing changed: dist is not rebuilt');
  // A source edited after the build: the build runs (here it starts by clearing dist; tsc is absent from the scratch copy).
  const future = new Date(Date.now() + 60_000);
  utimesSync(join(dir, 'src', 'cli.ts'), future, future);
  step();
  assert.ok(!existsSync(join(dir, 'dist', 'kept')), 'a newer source: dist is rebuilt');
});

test('npm start runs the gateway with glibc\'s malloc thresholds fixed at 128 KiB, and keeps an operator\'s own values', (t) => {
  // glibc raises both thresholds each time a large block is freed and then keeps freed memory in its arenas:
  // the embedded default idled ~14 MB higher (docs/benchmarks.md). It reads them only at process start.
  // dist/cli.js stands in for the gateway: it prints what it was started with.
  const dir = scratch(t, 'tollgate-start-env-', {},
    { 'cli.js': 'console.log(JSON.stringify({ argv: process.argv.slice(2), mmap: process.env.MALLOC_MMAP_THRESHOLD_, trim: process.env.MALLOC_TRIM_THRESHOLD_ }));\n' });
  const start = (env) => npmStart(dir, { MALLOC_MMAP_THRESHOLD_: '', MALLOC_TRIM_THRESHOLD_: '', ...env });
  assert.deepEqual(start({}), { argv: ['serve'], mmap: '131072', trim: '131072' });
  assert.deepEqual(start({ MALLOC_MMAP_THRESHOLD_: '65536' }), { argv: ['serve'], mmap: '65536', trim: '131072' }, 'an operator\'s value is kept');
});

test('npm start gives the gateway Node 20\'s young generation (16 MB semi-spaces) on Node 24 too, and keeps an operator\'s own NODE_OPTIONS', (t) => {
  // Node 24's V8 lets the young generation grow to 64 MB semi-spaces where Node 20 and 22 stop at 16: the gateway
  // on PostgreSQL + Redis then idled about 85 MB higher after a load, for no CPU measurably saved (docs/benchmarks.md,
  // "The young generation on Node 24"). A smaller young generation shows as a smaller heap_size_limit (V8 counts
  // the young generation's ceiling in it); dist/cli.js stands in for the gateway and prints that and NODE_OPTIONS.
  const node24 = nodeBinary(24);
  const report = 'console.log(JSON.stringify({ options: process.env.NODE_OPTIONS, limit: require("node:v8").getHeapStatistics().heap_size_limit }));';
  const dir = scratch(t, 'tollgate-start-young-', {}, { 'cli.js': `${report}\n` });
  writeFileSync(join(dir, 'dist', 'package.json'), '{"type":"commonjs"}');
  const path = `${dirname(node24)}:${process.env.PATH}`;
  const start = (options) => npmStart(dir, { PATH: path, NODE_OPTIONS: options });
  const limit = (...flags) => Number(execFileSync(node24, [...flags, '-p', 'require("node:v8").getHeapStatistics().heap_size_limit'], { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } }));
  const own = limit();
  const sixteen = limit('--max-semi-space-size=16');
  assert.ok(sixteen < own, `Node 24's own young generation is larger than 16 MB semi-spaces (${own} against ${sixteen})`);
  assert.equal(start('').limit, sixteen, 'npm start: 16 MB semi-spaces');
  const operator = start('--max-semi-space-size=64');
  assert.equal(operator.limit, limit('--max-semi-space-size=64'), 'an operator\'s own value wins');
  assert.match(operator.options, /--max-semi-space-size=64$/);
});

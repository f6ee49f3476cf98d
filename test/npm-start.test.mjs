// `npm start` builds only when a source is newer than the last build: the package's own scripts, run in a scratch copy.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './helpers/gateway.mjs';

test('npm start\'s build step leaves dist alone when nothing changed since the last build, and rebuilds when a source is newer', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-start-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  copyFileSync(join(ROOT, 'package.json'), join(dir, 'package.json'));
  for (const f of ['package-lock.json', 'tsconfig.json']) writeFileSync(join(dir, f), '{}');
  mkdirSync(join(dir, 'src'));
  writeFileSync(join(dir, 'src', 'cli.ts'), '');
  mkdirSync(join(dir, 'dist'));
  writeFileSync(join(dir, 'dist', 'kept'), 'built earlier');
  const past = new Date(Date.now() - 60_000);
  for (const f of ['package.json', 'package-lock.json', 'tsconfig.json', 'src', join('src', 'cli.ts')]) utimesSync(join(dir, f), past, past);
  writeFileSync(join(dir, 'dist', '.built'), '');
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
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-start-env-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  copyFileSync(join(ROOT, 'package.json'), join(dir, 'package.json'));
  for (const f of ['package-lock.json', 'tsconfig.json']) writeFileSync(join(dir, f), '{}');
  mkdirSync(join(dir, 'src'));
  mkdirSync(join(dir, 'node_modules'));
  mkdirSync(join(dir, 'dist'));
  // dist/cli.js stands in for the gateway: it prints what it was started with.
  writeFileSync(join(dir, 'dist', 'cli.js'), 'console.log(JSON.stringify({ argv: process.argv.slice(2), mmap: process.env.MALLOC_MMAP_THRESHOLD_, trim: process.env.MALLOC_TRIM_THRESHOLD_ }));\n');
  const past = new Date(Date.now() - 60_000);
  for (const f of ['package.json', 'package-lock.json', 'tsconfig.json', 'src']) utimesSync(join(dir, f), past, past);
  writeFileSync(join(dir, 'dist', '.built'), '');
  const start = (env) => {
    const r = spawnSync('npm', ['start', '--silent'], { cwd: dir, encoding: 'utf8', env: { ...process.env, MALLOC_MMAP_THRESHOLD_: '', MALLOC_TRIM_THRESHOLD_: '', ...env } });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout.trim().split('\n').at(-1));
  };
  assert.deepEqual(start({}), { argv: ['serve'], mmap: '131072', trim: '131072' });
  assert.deepEqual(start({ MALLOC_MMAP_THRESHOLD_: '65536' }), { argv: ['serve'], mmap: '65536', trim: '131072' }, 'an operator\'s value is kept');
});

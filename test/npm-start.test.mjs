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

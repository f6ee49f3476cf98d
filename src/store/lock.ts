// One process at a time may open an embedded data dir: a pid lock file, taken over only from a dead owner.
import { openSync, closeSync, writeSync, readFileSync, rmSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

export class DataDirBusy extends Error {}

export function lockDataDir(dataDir: string): () => void {
  mkdirSync(join(dataDir, 'run'), { recursive: true, mode: 0o700 });
  const path = join(dataDir, 'run', 'owner.pid');
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return () => { try { if (readFileSync(path, 'utf8') === String(process.pid)) rmSync(path); } catch { /* already gone */ } };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const pid = Number(readFileSync(path, 'utf8'));
      if (pid && isAlive(pid)) throw new DataDirBusy(`data dir ${dataDir} is in use by process ${pid}`);
      rmSync(path, { force: true });
    }
  }
  throw new DataDirBusy(`could not lock data dir ${dataDir}`);
}

function isAlive(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch (e) { return (e as NodeJS.ErrnoException).code === 'EPERM'; }
}

// An append-only file of priced debits not yet committed: what a single process replays after a crash.
import { closeSync, existsSync, fstatSync, ftruncateSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * One line per event: `D <id> <json>` when a debit is priced, `C <id>` when it is committed. Each
 * append is one write(2) on an O_APPEND descriptor, so once it returns the line is in the kernel's
 * page cache and survives the process being killed (kill -9, an OOM kill, a crash). It is not
 * fsynced: a power loss or kernel panic can lose the last lines (the README says so).
 */
export class DebitJournal {
  private readonly fd: number;
  private open = new Map<string, string>();
  private bytes: number;

  constructor(readonly path: string) {
    mkdirSync(dirname(path), { recursive: true });
    const before = existsSync(path) ? readFileSync(path, 'utf8') : '';
    for (const line of before.split('\n')) {
      if (line.startsWith('D ')) {
        const sp = line.indexOf(' ', 2);
        if (sp > 0) this.open.set(line.slice(2, sp), line.slice(sp + 1));
      } else if (line.startsWith('C ')) this.open.delete(line.slice(2));
    }
    this.fd = openSync(path, 'a');
    this.bytes = fstatSync(this.fd).size;
  }

  /** Debits recorded by an earlier run and never marked committed: id -> entry JSON. */
  leftovers(): Map<string, string> {
    return new Map(this.open);
  }

  record(id: string, entry: string): void {
    this.append(`D ${id} ${entry}\n`);
    this.open.set(id, entry);
  }

  committed(ids: string[]): void {
    if (ids.length === 0) return;
    for (const id of ids) this.open.delete(id);
    // Nothing open and the file has grown: start it afresh (everything in it is committed).
    if (this.open.size === 0 && this.bytes > 1 << 20) {
      ftruncateSync(this.fd, 0);
      this.bytes = 0;
      return;
    }
    this.append(ids.map((id) => `C ${id}\n`).join(''));
  }

  private append(text: string): void {
    const buf = Buffer.from(text);
    writeSync(this.fd, buf, 0, buf.length);
    this.bytes += buf.length;
  }

  close(): void {
    closeSync(this.fd);
  }
}

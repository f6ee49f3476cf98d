// A realtime session's uncommitted input PCM, addressed by absolute sample positions since the session began.
/** Input PCM since the last commit or clear, addressed by absolute sample positions since the session began. */
export class InputAudio {
  private chunks: Buffer[] = [];
  private bytes = 0;
  /** Absolute sample position of the first buffered sample. */
  base = 0;

  get end(): number { return this.base + this.bytes / 2; }

  append(b: Buffer): void { this.chunks.push(b); this.bytes += b.length; }

  /** The samples [from, to) (clamped to what is buffered), as bytes. */
  slice(from: number, to: number): Buffer {
    const all = this.whole();
    return all.subarray(Math.max(0, from - this.base) * 2, Math.max(0, Math.min(to, this.end) - this.base) * 2);
  }

  /** Forgets everything before `at`. */
  dropBefore(at: number): void {
    if (at <= this.base) return;
    const all = this.whole();
    const cut = Math.min(all.length, (at - this.base) * 2);
    const rest = Buffer.from(all.subarray(cut));
    this.chunks = rest.length > 0 ? [rest] : [];
    this.bytes = rest.length;
    this.base += cut / 2;
  }

  clear(): void { this.dropBefore(this.end); }

  private whole(): Buffer {
    if (this.chunks.length > 1) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0] ?? Buffer.alloc(0);
  }
}

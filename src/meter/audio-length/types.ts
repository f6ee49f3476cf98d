// What a frame counter reports: the seconds its frames decode to, and the bytes it could not place in any frame or tag.
export interface Counted {
  /** Σ samples ÷ rate over every whole frame present. */
  seconds: number;
  /** Bytes that are neither a counted frame nor a tag or header the format defines (junk, a truncated last frame). */
  uncovered: number;
  container: string;
  codec: string;
  sampleRate: number;
  channels: number;
}

/** Samples summed per rate, divided once at the end: 90 × 576 ÷ 24,000 added frame by frame would not be exactly 2.16. */
export class SampleSum {
  private readonly byRate = new Map<number, number>();

  add(samples: number, rate: number): void {
    this.byRate.set(rate, (this.byRate.get(rate) ?? 0) + samples);
  }

  get seconds(): number {
    let s = 0;
    for (const [rate, n] of this.byRate) s += n / rate;
    return s;
  }
}

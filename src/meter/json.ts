// Meters a buffered JSON reply: its usage block, or Tollgate's count when the upstream reports none.
import type { Meter } from '../exchange/meter.js';
import { usage, type Usage } from '../exchange/usage.js';
import { upstreamMalformed } from '../proxy/upstream.js';
import { readUsage } from './sse.js';
import { nameModel } from './model-name.js';

export interface JsonMeterOptions {
  /** Prompt tokens counted by Tollgate, for a reply without usage. */
  promptTokens(): number;
  /** Output tokens counted from the reply, for a reply without usage. */
  outputTokens(json: Record<string, unknown>): number;
  /** Re-shapes the reply for the client (Responses translation); the upstream's bytes otherwise. */
  reshape?(json: Record<string, unknown>): string;
  /** The model id the reply names (Tollgate's): a top-level `model` that differs is replaced, the other bytes kept. */
  model?: string;
}

export class JsonMeter implements Meter {
  readonly mode = 'buffered';
  done = false;
  private readonly parts: Buffer[] = [];
  private size = 0;
  private result: Usage | null = null;

  constructor(private readonly opts: JsonMeterOptions) {}

  onResponse(): { contentType: string } {
    return { contentType: 'application/json' };
  }

  onData(chunk: Buffer): string {
    this.parts.push(chunk);
    this.size += chunk.length;
    return '';
  }

  /** Parses the whole reply (a body that is not a JSON object is malformed) and returns what the client gets. */
  onEnd(complete: boolean): Buffer | string {
    if (!complete) throw upstreamMalformed();
    const buf = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, this.size);
    let json: Record<string, unknown>;
    const text = buf.toString('utf8');
    try {
      const v = JSON.parse(text) as unknown;
      if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
      json = v as Record<string, unknown>;
    } catch {
      throw upstreamMalformed();
    }
    this.done = true;
    const u = readUsage(json.usage);
    this.result = u
      ? usage({ inputTokens: u.input, outputTokens: u.output, reasoningTokens: u.reasoning, basis: 'exact' })
      : usage({ inputTokens: this.opts.promptTokens(), outputTokens: this.opts.outputTokens(json), basis: 'estimated' });
    if (this.opts.reshape) return this.opts.reshape(json);
    const ours = this.opts.model;
    return ours !== undefined && typeof json.model === 'string' && json.model !== ours ? nameModel(text, ['model'], JSON.stringify(ours)) : buf;
  }

  get produced(): boolean {
    return this.done;
  }

  usage(): Usage {
    return this.result ?? usage({ basis: 'partial' });
  }
}

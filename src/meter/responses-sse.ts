// Meters an OpenAI Responses event stream passed through from an upstream that serves /v1/responses.
import type { Meter } from '../exchange/meter.js';
import type { Usage } from '../exchange/usage.js';
import { SSE_TYPE, SseEvents, readUsage, streamUsage, type StreamUsage } from './sse.js';
import { nameModel } from './model-name.js';
import { COST_MARK, putCost } from './cost-mark.js';

// Events that carry produced output: the fallback count of output tokens when the stream is cut.
const OUTPUT_DELTAS = new Set(['response.output_text.delta', 'response.function_call_arguments.delta',
  'response.reasoning_text.delta', 'response.reasoning_summary_text.delta', 'response.refusal.delta']);
// Events that end a response; completed and incomplete carry the final usage.
const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed', 'error']);

export class ResponsesSseMeter implements Meter {
  readonly mode = 'stream';
  reported: StreamUsage | null = null;
  final = false;
  done = false;
  private deltas = 0;
  private readonly events = new SseEvents();

  /** The model id as JSON text, when the Response objects in events must name it (not the upstream's name). */
  private readonly ours: string | null;

  /** `cost`: what a usage costs; given, `response.completed` (or `.incomplete`) carries `response.usage.cost`, exactly the debit. */
  constructor(private readonly promptTokens: () => number = () => 0, model?: string, private readonly cost?: (u: Usage) => bigint) {
    this.ours = model === undefined ? null : JSON.stringify(model);
  }

  onResponse(): { contentType: string } {
    return { contentType: SSE_TYPE };
  }

  onEnd(): string {
    return '';
  }

  get produced(): boolean {
    return this.producedTokens() > 0;
  }

  usage(): Usage {
    return streamUsage(this.reported, this.final, this.done, this.producedTokens(), this.promptTokens);
  }

  /** Feeds upstream bytes; returns them whole events at a time, unchanged but for the Response's `model`. */
  onData(chunk: Buffer): string {
    let out = '';
    for (const raw of this.events.push(chunk)) {
      const priced = this.event(raw);
      if (priced !== null) { out += priced; continue; }
      const data = raw.indexOf('data:');
      out += this.ours === null || data < 0 ? raw : nameModel(raw, ['response', 'model'], this.ours, data + 5);
    }
    return out;
  }

  producedTokens(): number {
    return Math.max(this.deltas, this.reported?.output ?? 0);
  }

  /** Reads one event; returns it rewritten when it is the final usage's and carries the cost (else null: forwarded as it came). */
  private event(raw: string): string | null {
    const data = raw.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
    if (!data) return null;
    let obj: { type?: unknown; response?: { usage?: Record<string, unknown> | null; model?: unknown } };
    try { obj = JSON.parse(data) as typeof obj; } catch { return null; }
    const type = typeof obj.type === 'string' ? obj.type : '';
    if (OUTPUT_DELTAS.has(type)) this.deltas++;
    if (!TERMINAL.has(type)) return null;
    this.done = true;
    const usage = readUsage(obj.response?.usage);
    if ((type === 'response.completed' || type === 'response.incomplete') && usage) {
      this.reported = usage;
      this.final = true;
      if (this.cost && obj.response?.usage) {
        obj.response.usage.cost = COST_MARK;
        if (this.ours !== null && typeof obj.response.model === 'string') obj.response.model = JSON.parse(this.ours) as string;
        const lines = raw.split(/\r?\n/).filter((l) => l !== '' && !l.startsWith('data:'));
        return `${lines.map((l) => `${l}\n`).join('')}data: ${putCost(JSON.stringify(obj), this.cost(this.usage()))}\n\n`;
      }
    }
    return null;
  }
}

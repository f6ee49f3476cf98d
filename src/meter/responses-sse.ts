// Meters an OpenAI Responses event stream passed through from an upstream that serves /v1/responses.
import type { Meter } from '../exchange/meter.js';
import type { Usage } from '../exchange/usage.js';
import { SSE_TYPE, SseEvents, readUsage, streamUsage, type StreamUsage } from './sse.js';
import { nameModel } from './model-name.js';

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

  constructor(private readonly promptTokens: () => number = () => 0, model?: string) {
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
      this.event(raw);
      const data = raw.indexOf('data:');
      out += this.ours === null || data < 0 ? raw : nameModel(raw, ['response', 'model'], this.ours, data + 5);
    }
    return out;
  }

  producedTokens(): number {
    return Math.max(this.deltas, this.reported?.output ?? 0);
  }

  private event(raw: string): void {
    const data = raw.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
    if (!data) return;
    let obj: { type?: unknown; response?: { usage?: Record<string, unknown> | null } };
    try { obj = JSON.parse(data) as typeof obj; } catch { return; }
    const type = typeof obj.type === 'string' ? obj.type : '';
    if (OUTPUT_DELTAS.has(type)) this.deltas++;
    if (!TERMINAL.has(type)) return;
    this.done = true;
    const usage = readUsage(obj.response?.usage);
    if ((type === 'response.completed' || type === 'response.incomplete') && usage) {
      this.reported = usage;
      this.final = true;
    }
  }
}

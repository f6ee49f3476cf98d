// Chat completion chunks → Responses streaming events (created, output items, text/argument deltas, completed).
import { newId, responseObject, usageObject, type ResponseShell } from './responses-map.js';
import { COST_MARK, putCost } from '../../meter/cost-mark.js';

type Obj = Record<string, unknown>;

interface TextItem { kind: 'text'; index: number; id: string; text: string }
interface CallItem { kind: 'call'; index: number; id: string; callId: string; name: string; args: string }

export class ResponsesStream {
  private seq = 0;
  private readonly items: (TextItem | CallItem)[] = [];
  private text: TextItem | null = null;
  private readonly calls = new Map<number, CallItem>();
  private finish: string | null = null;
  private usage: Obj | null = null;

  constructor(private readonly sh: ResponseShell) {}

  private ev(type: string, body: Obj): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.seq++, ...body })}\n\n`;
  }

  start(): string {
    const r = responseObject(this.sh, 'in_progress', [], null, null);
    return this.ev('response.created', { response: r }) + this.ev('response.in_progress', { response: r });
  }

  chunk(c: Obj): string {
    let out = '';
    const u = c.usage as Obj | null | undefined;
    if (u && Array.isArray(c.choices) && c.choices.length === 0) {
      const d = (u.completion_tokens_details ?? {}) as Obj;
      this.usage = usageObject(Number(u.prompt_tokens ?? 0), Number(u.completion_tokens ?? 0), Number(d.reasoning_tokens ?? 0));
      return '';
    }
    for (const choice of (c.choices as Obj[] | undefined) ?? []) {
      if ((choice.index ?? 0) !== 0) continue; // a Response has one output; n > 1 is not part of its shape
      const delta = (choice.delta ?? {}) as Obj;
      if (typeof delta.content === 'string' && delta.content.length > 0) {
        if (!this.text) {
          this.text = { kind: 'text', index: this.items.length, id: newId('msg'), text: '' };
          this.items.push(this.text);
          out += this.ev('response.output_item.added', { output_index: this.text.index, item: { type: 'message', id: this.text.id, status: 'in_progress', role: 'assistant', content: [] } });
          out += this.ev('response.content_part.added', { item_id: this.text.id, output_index: this.text.index, content_index: 0, part: { type: 'output_text', text: '', annotations: [], logprobs: [] } });
        }
        this.text.text += delta.content;
        out += this.ev('response.output_text.delta', { item_id: this.text.id, output_index: this.text.index, content_index: 0, delta: delta.content, logprobs: [] });
      }
      for (const tc of (delta.tool_calls as Obj[] | undefined) ?? []) {
        const i = Number(tc.index ?? 0);
        const fn = (tc.function ?? {}) as Obj;
        let call = this.calls.get(i);
        if (!call) {
          call = { kind: 'call', index: this.items.length, id: newId('fc'), callId: String(tc.id ?? newId('call')), name: String(fn.name ?? ''), args: '' };
          this.calls.set(i, call);
          this.items.push(call);
          out += this.ev('response.output_item.added', { output_index: call.index, item: this.callItem(call, 'in_progress') });
        }
        if (typeof fn.arguments === 'string' && fn.arguments.length > 0) {
          call.args += fn.arguments;
          out += this.ev('response.function_call_arguments.delta', { item_id: call.id, output_index: call.index, delta: fn.arguments });
        }
      }
      if (typeof choice.finish_reason === 'string') this.finish = choice.finish_reason;
    }
    return out;
  }

  private callItem(c: CallItem, status: string): Obj {
    return { type: 'function_call', id: c.id, call_id: c.callId, name: c.name, arguments: status === 'completed' ? c.args : '', status };
  }

  private textItem(t: TextItem): Obj {
    return { type: 'message', id: t.id, status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: t.text, annotations: [], logprobs: [] }] };
  }

  /** Closes every open item and emits response.completed (or .incomplete) with the usage. */
  done(cost?: bigint): string {
    let out = '';
    for (const it of this.items) {
      if (it.kind === 'text') {
        out += this.ev('response.output_text.done', { item_id: it.id, output_index: it.index, content_index: 0, text: it.text, logprobs: [] });
        out += this.ev('response.content_part.done', { item_id: it.id, output_index: it.index, content_index: 0, part: { type: 'output_text', text: it.text, annotations: [], logprobs: [] } });
        out += this.ev('response.output_item.done', { output_index: it.index, item: this.textItem(it) });
      } else {
        out += this.ev('response.function_call_arguments.done', { item_id: it.id, output_index: it.index, name: it.name, arguments: it.args });
        out += this.ev('response.output_item.done', { output_index: it.index, item: this.callItem(it, 'completed') });
      }
    }
    const incomplete = this.finish === 'length' ? 'max_output_tokens' : null;
    const output = this.items.map((it) => (it.kind === 'text' ? this.textItem(it) : this.callItem(it, 'completed')));
    // The usage carries the exchange's cost (exactly its debit) when the stream was priced.
    const usage = this.usage && cost !== undefined ? { ...this.usage, cost: COST_MARK } : this.usage;
    const r = responseObject(this.sh, incomplete ? 'incomplete' : 'completed', output, usage, incomplete);
    const last = this.ev(incomplete ? 'response.incomplete' : 'response.completed', { response: r });
    return out + (cost !== undefined ? putCost(last, cost) : last);
  }
}

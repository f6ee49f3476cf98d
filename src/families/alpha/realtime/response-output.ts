// What a realtime response tells the client: its items and deltas translated from the chat model's stream, and the events that close it (response.done with its usage and cost).
import type { GatewayError } from '../../../errors.js';
import type { Usage } from '../../../exchange/usage.js';
import type { SessionContext } from './context.js';
import type { Plan } from './response-plan.js';
import { rid, withCost, type Active, type Item, type Obj } from './protocol.js';

/** A response's status as response.done states it. */
export type Status = 'completed' | 'cancelled' | 'failed' | 'incomplete';

/**
 * The output of one response, built as the chat stream is read: `chunk` turns one chat completion
 * chunk into the realtime events it makes (the text item or function calls added, their deltas) as
 * frames to send, and hands the text to `spoken` (the speaker); `closing` makes the events that end
 * the response, its items joining the conversation unless it runs out of band.
 */
export class ResponseOutput {
  readonly text: Item = { id: rid('item'), object: 'realtime.item', type: 'message', role: 'assistant', status: 'in_progress', content: [] };
  /** The items in output order. */
  readonly order: Item[] = [];
  private readonly calls = new Map<number, Item>();
  private textSoFar = '';
  private spokenOut: ((text: string) => void) | null = null;

  constructor(private readonly ctx: SessionContext, private readonly a: Active, private readonly plan: Plan) {}

  /** Where the reply's text goes to be spoken (audio output). */
  speakTo(push: (text: string) => void): void { this.spokenOut = push; }

  get spoken(): boolean { return this.plan.speech !== null; }
  index(it: Item): number { return this.order.indexOf(it); }

  response(status: string, output: Item[], usage: Obj | null, details: Obj | null = null): Obj {
    return { object: 'realtime.response', id: this.a.id, status, status_details: details, output, conversation_id: this.ctx.socket.id,
      output_modalities: this.plan.modalities, max_output_tokens: this.ctx.session.max_output_tokens, metadata: this.plan.metadata, usage };
  }

  /** The response.done of a response refused before it ran (its hold: balance, ceiling, rate). */
  refused(e: GatewayError): Obj {
    return { type: 'response.done', response: this.response('failed', [], null, { type: 'failed', error: { type: e.type, code: e.code } }) };
  }

  /** One chat completion chunk: the realtime events it makes, as frames (one JSON event a line, each line ended). */
  chunk(obj: Obj): string {
    const events: Obj[] = [];
    const a = this.a;
    for (const c of (obj.choices as Obj[] | undefined) ?? []) {
      const d = (c.delta ?? {}) as Obj;
      if (typeof d.content === 'string' && d.content.length > 0) {
        if (!this.order.includes(this.text)) {
          this.add(this.text, events, { ...this.text, content: [] });
          events.push({ type: 'response.content_part.added', response_id: a.id, item_id: this.text.id, output_index: this.index(this.text), content_index: 0, part: this.spoken ? { type: 'audio', transcript: '' } : { type: 'text', text: '' } });
        }
        this.textSoFar += d.content;
        this.spokenOut?.(d.content);
        events.push({ type: this.spoken ? 'response.output_audio_transcript.delta' : 'response.output_text.delta', response_id: a.id, item_id: this.text.id, output_index: this.index(this.text), content_index: 0, delta: d.content });
      }
      for (const tc of (d.tool_calls as Obj[] | undefined) ?? []) {
        const idx = typeof tc.index === 'number' ? tc.index : 0;
        const fn = (tc.function ?? {}) as Obj;
        let call = this.calls.get(idx);
        if (!call) {
          call = { id: rid('item'), object: 'realtime.item', type: 'function_call', status: 'in_progress', call_id: typeof tc.id === 'string' ? tc.id : rid('call'), name: typeof fn.name === 'string' ? fn.name : '', arguments: '' };
          this.calls.set(idx, call);
          this.add(call, events, { ...call });
        }
        if (typeof fn.arguments === 'string' && fn.arguments.length > 0) {
          call.arguments += fn.arguments;
          events.push({ type: 'response.function_call_arguments.delta', response_id: a.id, item_id: call.id, output_index: this.index(call), call_id: call.call_id, delta: fn.arguments });
        }
      }
    }
    // Each frame ends its line: the meter joins what several chunks of one read make.
    return events.map((ev) => `${JSON.stringify({ event_id: rid('event'), ...ev })}\n`).join('');
  }

  private add(it: Item, events: Obj[], shown: Item): void {
    this.order.push(it);
    this.a.itemIds.push(it.id);
    events.push({ type: 'response.output_item.added', response_id: this.a.id, output_index: this.order.length - 1, item: shown });
  }

  /** The events that end the response, as frames: its items done (joining the conversation), then response.done with its usage and `cost`. */
  closing(status: Status, failure: GatewayError | null, u: Usage, cost: bigint): string[] {
    const { a, text } = this;
    const events: Obj[] = [];
    const itemStatus = status === 'completed' ? 'completed' : 'incomplete';
    if (this.order.includes(text)) {
      text.status = itemStatus;
      const at = { response_id: a.id, item_id: text.id, output_index: this.index(text), content_index: 0 };
      const t = this.textSoFar;
      if (this.spoken) {
        text.content = [{ type: 'output_audio', transcript: t }];
        events.push({ type: 'response.output_audio_transcript.done', ...at, transcript: t }, { type: 'response.content_part.done', ...at, part: { type: 'audio', transcript: t } });
      } else {
        text.content = [{ type: 'output_text', text: t }];
        events.push({ type: 'response.output_text.done', ...at, text: t }, { type: 'response.content_part.done', ...at, part: { type: 'text', text: t } });
      }
    }
    for (const c of this.calls.values()) {
      c.status = itemStatus;
      events.push({ type: 'response.function_call_arguments.done', response_id: a.id, item_id: c.id, output_index: this.index(c), call_id: c.call_id, name: c.name, arguments: c.arguments });
    }
    for (const it of this.order) {
      events.push({ type: 'response.output_item.done', response_id: a.id, output_index: this.index(it), item: it });
      if (!this.plan.outOfBand) this.ctx.items.push(it);
    }
    const usage = { total_tokens: u.inputTokens + u.outputTokens, input_tokens: u.inputTokens, output_tokens: u.outputTokens,
      input_token_details: { cached_tokens: 0, text_tokens: u.inputTokens, audio_tokens: 0, image_tokens: 0 },
      output_token_details: { text_tokens: u.outputTokens, audio_tokens: 0 } };
    const details = status === 'cancelled' ? { type: 'cancelled', reason: a.cancelReason }
      : failure ? { type: 'failed', error: { type: failure.type, code: failure.code, message: failure.message } }
        : status === 'completed' ? null : { type: 'incomplete', reason: 'upstream_ended' };
    const frames = events.map((ev) => JSON.stringify({ event_id: rid('event'), ...ev }));
    const done = { event_id: rid('event'), type: 'response.done', response: this.response(status, this.order, usage, details) };
    frames.push(withCost(done, done.response, cost));
    return frames;
  }
}

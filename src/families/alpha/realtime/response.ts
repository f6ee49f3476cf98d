// One realtime response run: its worst case held, the chat model's stream translated into realtime events, the reply spoken if asked, and what was used settled as one part of the session.
import { GatewayError } from '../../../errors.js';
import { price } from '../../../ledger/pricing.js';
import { nd } from '../../../money.js';
import { SseMeter } from '../../../meter/sse.js';
import { chatPromptTokens } from '../../../meter/tokens.js';
import type { Usage } from '../../../exchange/usage.js';
import { callFor } from './calls.js';
import type { SessionContext } from './context.js';
import type { Plan } from './response-plan.js';
import { Speaker, type SpeechResult } from './speech.js';
import { POLICY, rid, type Active, type Item, type Obj } from './protocol.js';

function responseObject(ctx: SessionContext, a: Active, plan: Plan, status: string, output: Item[], usage: Obj | null, details: Obj | null = null): Obj {
  return { object: 'realtime.response', id: a.id, status, status_details: details, output, conversation_id: ctx.socket.id,
    output_modalities: plan.modalities, max_output_tokens: ctx.session.max_output_tokens, metadata: plan.metadata, usage };
}

/**
 * One response: hold its worst case (the prompt's bytes as tokens, the most output), stream the
 * chat model's reply as realtime events, speak it sentence by sentence as it streams when audio is
 * asked for (each sentence's characters held before its call), and settle what was used as one
 * part: the tokens the upstream reported (what was produced, if it broke), and the characters sent
 * for synthesis. While it runs, its running record (the same debit as that settle) is written at its
 * first output and then at most once a second, each time before the output is sent: a process killed
 * mid-response is billed by recovery for the usage at the last record. Responses and transcriptions
 * run one at a time (ctx.queue) and only responses record, so the session's one record is always
 * the latest response's.
 */
export async function respond(ctx: SessionContext, a: Active, plan: Plan): Promise<void> {
  ctx.active = a;
  const { body, messages } = plan.build();
  const payload = Buffer.from(JSON.stringify(body));
  const worst = price(ctx.charge.prices, { inputTokens: payload.length, outputTokens: plan.maxOut, characters: 0, audioInMs: 0, audioOutMs: 0 });
  try {
    // Each response is a billed unit: balance and ceiling checked again, and it takes a token of the key's rpm.
    await ctx.charge.extend(worst, { countsAsRequest: true });
  } catch (e) {
    ctx.active = null;
    if (!(e instanceof GatewayError)) throw e;
    await ctx.emit({ type: 'response.done', response: responseObject(ctx, a, plan, 'failed', [], null, { type: 'failed', error: { type: e.type, code: e.code } }) });
    await ctx.error(e.code, e.message, null, null, e.type);
    ctx.end(POLICY, e.code);
    return;
  }
  const seq = ++ctx.seq;
  const spoken = plan.speech !== null;
  await ctx.emit({ type: 'response.created', response: responseObject(ctx, a, plan, 'in_progress', [], null) });
  const text: Item = { id: rid('item'), object: 'realtime.item', type: 'message', role: 'assistant', status: 'in_progress', content: [] };
  const calls = new Map<number, Item>();
  const events: Obj[] = [];
  let textStarted = false;
  let textSoFar = '';
  let outputIndex = 0;
  const order: Item[] = [];
  // Audio output carries the text as its transcript.
  const deltaType = spoken ? 'response.output_audio_transcript.delta' : 'response.output_text.delta';
  const emptyPart = spoken ? { type: 'audio', transcript: '' } : { type: 'text', text: '' };
  // The running record of this part (its ledger key `<session id>#<seq>`, the debit its settle makes):
  // the tokens so far and the characters and audio spoken so far. Throttled by the charge (the first at
  // once, then at most once a second); written only once output exists (nothing produced, nothing billed).
  const record = (): Promise<void> => {
    if (!meter.produced || !ctx.charge.progressDue(seq)) return Promise.resolve();
    const spokenSoFar = speaker?.soFar() ?? { characters: 0, audioOutMs: 0 };
    return ctx.charge.progress({ ...meter.usage(), ...spokenSoFar }, { seq });
  };
  const speaker = plan.speech ? new Speaker(ctx, a, plan.speech, text, () => order.indexOf(text), seq, record) : null;
  const startText = () => {
    if (textStarted) return;
    textStarted = true;
    order.push(text);
    a.itemIds.push(text.id);
    events.push({ type: 'response.output_item.added', response_id: a.id, output_index: outputIndex++, item: { ...text, content: [] } });
    events.push({ type: 'response.content_part.added', response_id: a.id, item_id: text.id, output_index: order.indexOf(text), content_index: 0, part: emptyPart });
  };
  const meter = new SseMeter({ stripUsageChunk: true, stripChunkUsage: false, promptTokens: () => chatPromptTokens(messages),
    translate: {
      start: () => '', done: () => '',
      chunk: (obj) => {
        for (const c of (obj.choices as Obj[] | undefined) ?? []) {
          const d = (c.delta ?? {}) as Obj;
          if (typeof d.content === 'string' && d.content.length > 0) {
            startText();
            textSoFar += d.content;
            speaker?.push(d.content);
            events.push({ type: deltaType, response_id: a.id, item_id: text.id, output_index: order.indexOf(text), content_index: 0, delta: d.content });
          }
          for (const tc of (d.tool_calls as Obj[] | undefined) ?? []) {
            const idx = typeof tc.index === 'number' ? tc.index : 0;
            const fn = (tc.function ?? {}) as Obj;
            let call = calls.get(idx);
            if (!call) {
              call = { id: rid('item'), object: 'realtime.item', type: 'function_call', status: 'in_progress', call_id: typeof tc.id === 'string' ? tc.id : rid('call'), name: typeof fn.name === 'string' ? fn.name : '', arguments: '' };
              calls.set(idx, call);
              order.push(call);
              a.itemIds.push(call.id);
              events.push({ type: 'response.output_item.added', response_id: a.id, output_index: outputIndex++, item: { ...call } });
            }
            if (typeof fn.arguments === 'string' && fn.arguments.length > 0) {
              call.arguments += fn.arguments;
              events.push({ type: 'response.function_call_arguments.delta', response_id: a.id, item_id: call.id, output_index: order.indexOf(call), call_id: call.call_id, delta: fn.arguments });
            }
          }
        }
        return '';
      },
    } });
  let failure: GatewayError | null = null;
  try {
    const { call, res, failed } = await callFor(ctx, a, ctx.model.upstream, '/v1/chat/completions', 'text/event-stream', payload, `${ctx.socket.id}-${seq}`);
    failure = failed;
    if (res) {
      for await (const chunk of res) {
        meter.onData(chunk as Buffer);
        // Recorded before any of it is sent: a process killed from here on still bills what the client got.
        await record();
        for (const ev of events.splice(0)) await ctx.emit(ev);
        // A failed speech chunk stops the reply: its text would go unspoken.
        if (a.cancelled || a.dropped || speaker?.failure) { call.abort(); break; }
      }
    }
  } catch (e) {
    if (!a.cancelled && !a.dropped) failure = e instanceof GatewayError ? e : new GatewayError({ status: 502, code: 'upstream_error', message: 'The model upstream failed mid-response.' });
  }
  failure ??= speaker?.failure ?? null;
  const textDone = meter.done && !a.cancelled && !a.dropped && failure === null;
  // The rest of the reply spoken (whole), or the speaking stopped (the reply ended short).
  const speech: SpeechResult = speaker ? await (textDone ? speaker.finish() : speaker.stop()) : { characters: 0, audioOutMs: 0, held: 0n, failure: null };
  failure ??= speech.failure;
  // What was produced is billed, whatever became of the socket; nothing produced, nothing billed.
  const complete = textDone && failure === null && !a.cancelled && !a.dropped;
  const m = meter.produced || textDone ? meter.usage() : { ...meter.usage(), inputTokens: 0, outputTokens: 0, reasoningTokens: 0 };
  const u: Usage = { ...m, characters: speech.characters, audioOutMs: speech.audioOutMs };
  await ctx.charge.settle(u, { seq, final: false, covers: nd(worst + speech.held), extra: a.dropped ? { client_dropped: true } : {} });
  ctx.active = null;
  // The output items, done; assistant output joins the conversation (unless out of band).
  const status = a.cancelled ? 'cancelled' : failure ? 'failed' : complete ? 'completed' : 'incomplete';
  if (textStarted) {
    text.status = status === 'completed' ? 'completed' : 'incomplete';
    const oi = order.indexOf(text);
    if (spoken) {
      text.content = [{ type: 'output_audio', transcript: textSoFar }];
      events.push({ type: 'response.output_audio_transcript.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, transcript: textSoFar });
      events.push({ type: 'response.content_part.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, part: { type: 'audio', transcript: textSoFar } });
    } else {
      text.content = [{ type: 'output_text', text: textSoFar }];
      events.push({ type: 'response.output_text.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, text: textSoFar });
      events.push({ type: 'response.content_part.done', response_id: a.id, item_id: text.id, output_index: oi, content_index: 0, part: { type: 'text', text: textSoFar } });
    }
  }
  for (const c of calls.values()) {
    c.status = status === 'completed' ? 'completed' : 'incomplete';
    events.push({ type: 'response.function_call_arguments.done', response_id: a.id, item_id: c.id, output_index: order.indexOf(c), call_id: c.call_id, name: c.name, arguments: c.arguments });
  }
  for (const it of order) {
    events.push({ type: 'response.output_item.done', response_id: a.id, output_index: order.indexOf(it), item: it });
    if (!plan.outOfBand) ctx.items.push(it);
  }
  const usageOut = { total_tokens: u.inputTokens + u.outputTokens, input_tokens: u.inputTokens, output_tokens: u.outputTokens,
    input_token_details: { cached_tokens: 0, text_tokens: u.inputTokens, audio_tokens: 0, image_tokens: 0 },
    output_token_details: { text_tokens: u.outputTokens, audio_tokens: 0 } };
  const details = a.cancelled ? { type: 'cancelled', reason: a.cancelReason }
    : failure ? { type: 'failed', error: { type: failure.type, code: failure.code, message: failure.message } }
      : complete ? null : { type: 'incomplete', reason: 'upstream_ended' };
  events.push({ type: 'response.done', response: responseObject(ctx, a, plan, status, order, usageOut, details) });
  if (a.dropped) return;
  for (const ev of events.splice(0)) await ctx.emit(ev);
  if (failure) await ctx.error(failure.code, failure.message, failure.param, null, failure.type);
}

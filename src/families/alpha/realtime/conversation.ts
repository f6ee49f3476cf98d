// A realtime conversation's items: a client's item checked, created (its audio transcribed), deleted, retrieved and truncated; the conversation as chat messages.
import type { SessionContext } from './context.js';
import { transcribe } from './transcribe.js';
import { rid, RtError, type Item, type Obj, type Spoken } from './protocol.js';

/**
 * A client item (message with text content, function_call, function_call_output), checked and given
 * an id. With `audio`, a user message's `input_audio` parts are taken too: their PCM goes into it by
 * content index (to be transcribed), the part itself keeps only its transcript (null until heard).
 */
export function clientItem(raw: unknown, param: string, audio?: Map<number, Buffer>): Item {
  if (!raw || typeof raw !== 'object') throw new RtError('invalid_value', param, `${param} must be an object.`);
  const it = raw as Obj;
  const type = it.type ?? 'message';
  const id = typeof it.id === 'string' && it.id ? it.id : rid('item');
  if (type === 'message') {
    const role = it.role;
    if (role !== 'user' && role !== 'system' && role !== 'assistant') throw new RtError('invalid_value', `${param}.role`, 'role must be user, system or assistant.');
    if (!Array.isArray(it.content)) throw new RtError('invalid_value', `${param}.content`, 'content must be a list of parts.');
    const content = (it.content as Obj[]).map((c, i) => {
      const t = c?.type;
      if (t === 'input_text' || t === 'text' || t === 'output_text') {
        if (typeof c.text !== 'string') throw new RtError('invalid_value', `${param}.content[${i}].text`, 'text must be a string.');
        return { type: t, text: c.text };
      }
      if (t === 'input_audio' && audio && role === 'user') {
        audio.set(i, pcmPart(c.audio, `${param}.content[${i}].audio`));
        return { type: t, transcript: null };
      }
      if (t === 'input_audio' || t === 'audio' || t === 'output_audio') {
        throw new RtError('unsupported_parameter', `${param}.content[${i}].type`, audio
          ? 'Audio content is taken in user messages only (input_audio); send an assistant reply as text.'
          : 'Audio content is taken in conversation.item.create only; send text here.');
      }
      throw new RtError('invalid_value', `${param}.content[${i}].type`, `content type ${JSON.stringify(t)} is not supported; use input_text.`);
    });
    return { id, object: 'realtime.item', type: 'message', role, status: 'completed', content };
  }
  if (type === 'function_call') {
    if (typeof it.call_id !== 'string' || typeof it.name !== 'string') throw new RtError('invalid_value', param, 'a function_call item needs call_id and name.');
    return { id, object: 'realtime.item', type, status: 'completed', call_id: it.call_id, name: it.name, arguments: typeof it.arguments === 'string' ? it.arguments : '' };
  }
  if (type === 'function_call_output') {
    if (typeof it.call_id !== 'string' || typeof it.output !== 'string') throw new RtError('invalid_value', param, 'a function_call_output item needs call_id and output (a string).');
    return { id, object: 'realtime.item', type, status: 'completed', call_id: it.call_id, output: it.output };
  }
  throw new RtError('invalid_value', `${param}.type`, `item type ${JSON.stringify(type)} is not supported.`);
}

/** An input_audio part's `audio`: base64 16-bit PCM at 24 kHz, whole samples, not empty. */
function pcmPart(v: unknown, param: string): Buffer {
  if (typeof v !== 'string') throw new RtError('invalid_value', param, '`audio` must be base64-encoded 16-bit PCM at 24 kHz.');
  const pcm = Buffer.from(v, 'base64');
  if (pcm.length === 0 || pcm.length % 2 !== 0) throw new RtError('invalid_value', param, '`audio` must be base64-encoded 16-bit PCM at 24 kHz: whole samples, not empty.');
  return pcm;
}

/** The conversation as chat messages (function calls as assistant tool calls, their outputs as tool messages). */
export function chatMessages(instructions: string, items: Item[]): Obj[] {
  const out: Obj[] = [];
  if (instructions) out.push({ role: 'system', content: instructions });
  for (const it of items) {
    if (it.type === 'message') {
      // Text parts, and the transcripts of audio parts (a user's committed turn, an assistant's spoken reply).
      out.push({ role: it.role, content: (it.content ?? []).map((c) => (typeof c.text === 'string' ? c.text : typeof c.transcript === 'string' ? c.transcript : '')).join('') });
    } else if (it.type === 'function_call') {
      const call = { id: it.call_id, type: 'function', function: { name: it.name, arguments: it.arguments ?? '' } };
      const last = out[out.length - 1];
      if (last?.role === 'assistant' && Array.isArray(last.tool_calls)) (last.tool_calls as Obj[]).push(call);
      else out.push({ role: 'assistant', content: null, tool_calls: [call] });
    } else if (it.type === 'function_call_output') {
      out.push({ role: 'tool', tool_call_id: it.call_id, content: it.output });
    }
  }
  return out;
}


/** conversation.item.create: the item inserted after `previous_item_id` (at the end by default; `root`: first). */
export async function createItem(ctx: SessionContext, m: Obj): Promise<void> {
  const items = ctx.items;
  const audio = new Map<number, Buffer>();
  const item = clientItem(m.item, 'item', audio);
  if (audio.size > 0 && !ctx.audio.stt) {
    throw new RtError('unsupported_parameter', `item.content[${[...audio.keys()][0]}].type`, 'Audio content needs a transcription (stt) model, and this gateway has none configured; send text.');
  }
  const prev = typeof m.previous_item_id === 'string' ? m.previous_item_id : undefined;
  let at = items.length;
  if (prev !== undefined && prev !== 'root') {
    const i = items.findIndex((x) => x.id === prev);
    if (i < 0) throw new RtError('invalid_value', 'previous_item_id', `No item ${prev.slice(0, 60)} in the conversation.`);
    at = i + 1;
  } else if (prev === 'root') at = 0;
  if (items.some((x) => x.id === item.id)) throw new RtError('invalid_value', 'item.id', `An item ${item.id.slice(0, 60)} already exists.`);
  items.splice(at, 0, item);
  await ctx.emit({ type: 'conversation.item.created', previous_item_id: at > 0 ? items[at - 1]!.id : null, item });
  // Each audio part is heard as a committed turn is (billed by its duration), in turn with responses:
  // a response.create sent after this item answers its transcript.
  for (const [index, pcm] of audio) {
    void ctx.queue('transcription', async () => { if (!ctx.ended) await transcribe(ctx, item, pcm, index); });
  }
}

export async function deleteItem(ctx: SessionContext, m: Obj): Promise<void> {
  const i = ctx.items.findIndex((x) => x.id === m.item_id);
  if (i < 0) throw new RtError('invalid_value', 'item_id', 'No such item in the conversation.');
  ctx.items.splice(i, 1);
  ctx.spoken.delete(m.item_id as string);
  await ctx.emit({ type: 'conversation.item.deleted', item_id: m.item_id });
}

export async function retrieveItem(ctx: SessionContext, m: Obj): Promise<void> {
  const it = ctx.items.find((x) => x.id === m.item_id);
  if (!it) throw new RtError('invalid_value', 'item_id', 'No such item in the conversation.');
  await ctx.emit({ type: 'conversation.item.retrieved', item: it });
}

/**
 * conversation.item.truncate: an assistant audio item cut at `audio_end_ms`, what the user heard.
 * Its transcript (what the model sees from now on) is cut to the words spoken by then: the audio of
 * each sentence spoken maps onto its characters in proportion. A response still producing the item
 * is waited for (an interrupted reply ends at once).
 */
export async function truncateItem(ctx: SessionContext, m: Obj): Promise<void> {
  const id = m.item_id;
  if (typeof id !== 'string') throw new RtError('invalid_value', 'item_id', '`item_id` must be the id of an assistant audio item.');
  if (m.content_index !== 0) throw new RtError('invalid_value', 'content_index', '`content_index` must be 0 (an assistant audio item has one part).');
  const end = m.audio_end_ms;
  if (!Number.isInteger(end) || (end as number) < 0) throw new RtError('invalid_value', 'audio_end_ms', '`audio_end_ms` must be a whole number of milliseconds, 0 or more.');
  const a = ctx.active;
  if (a?.finished && a.itemIds.includes(id) && !ctx.items.some((x) => x.id === id)) await a.finished;
  const item = ctx.items.find((x) => x.id === id);
  if (!item) throw new RtError('invalid_value', 'item_id', `No item ${id.slice(0, 60)} in the conversation.`);
  const part = item.content?.[0];
  const spoken = ctx.spoken.get(id);
  if (item.type !== 'message' || item.role !== 'assistant' || part?.type !== 'output_audio' || !spoken) {
    throw new RtError('invalid_value', 'item_id', 'Only an assistant message with audio can be truncated.');
  }
  const total = spoken.reduce((n, s) => n + s.ms, 0);
  if ((end as number) > total) throw new RtError('invalid_value', 'audio_end_ms', `audio_end_ms ${end as number} is past the item's audio (${total} ms).`);
  const heard = heardOf(spoken, end as number);
  ctx.spoken.set(id, heard);
  part.transcript = heard.map((s) => s.text).join('');
  await ctx.emit({ type: 'conversation.item.truncated', item_id: id, content_index: 0, audio_end_ms: end });
}

/** The stretches of audio up to `end` ms: the last one's text cut in proportion, back to its last whole word. */
function heardOf(spoken: Spoken[], end: number): Spoken[] {
  const out: Spoken[] = [];
  let at = 0;
  for (const s of spoken) {
    if (at + s.ms <= end) { out.push(s); at += s.ms; continue; }
    const ms = end - at;
    // A stretch cut short (a cancelled reply) has audio for part of its text only: its rate is read from the whole ones.
    const whole = spoken.filter((x) => !x.cut);
    const msPerChar = s.cut && whole.length > 0 ? whole.reduce((n, x) => n + x.ms, 0) / Math.max(1, whole.reduce((n, x) => n + [...x.text].length, 0)) : s.ms / Math.max(1, [...s.text].length);
    const chars = [...s.text];
    let n = Math.min(chars.length, Math.floor(ms / msPerChar));
    // A word is heard whole or not at all.
    if (n < chars.length && !/\s/.test(chars[n]!)) { while (n > 0 && !/\s/.test(chars[n - 1]!)) n--; }
    if (ms > 0) out.push({ text: chars.slice(0, n).join('').trimEnd(), ms, cut: true });
    break;
  }
  return out;
}

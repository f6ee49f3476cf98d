// A realtime conversation's items: a client's item checked, created, deleted and retrieved; the conversation as chat messages.
import type { SessionContext } from './context.js';
import { rid, RtError, type Item, type Obj } from './protocol.js';

/** A client item (message with text content, function_call, function_call_output), checked and given an id. */
export function clientItem(raw: unknown, param: string): Item {
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
      if (t === 'input_audio' || t === 'audio' || t === 'output_audio') throw new RtError('unsupported_parameter', `${param}.content[${i}].type`, 'Audio content is not available here yet; send text.');
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
  const item = clientItem(m.item, 'item');
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
}

export async function deleteItem(ctx: SessionContext, m: Obj): Promise<void> {
  const i = ctx.items.findIndex((x) => x.id === m.item_id);
  if (i < 0) throw new RtError('invalid_value', 'item_id', 'No such item in the conversation.');
  ctx.items.splice(i, 1);
  await ctx.emit({ type: 'conversation.item.deleted', item_id: m.item_id });
}

export async function retrieveItem(ctx: SessionContext, m: Obj): Promise<void> {
  const it = ctx.items.find((x) => x.id === m.item_id);
  if (!it) throw new RtError('invalid_value', 'item_id', 'No such item in the conversation.');
  await ctx.emit({ type: 'conversation.item.retrieved', item: it });
}

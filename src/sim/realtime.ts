// The sim's WS /v1/realtime: OpenAI's realtime protocol (GA events) for text turns, usage counted as the sim's chat counts it (test infrastructure).
import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { WebSocketServer, type WebSocket } from 'ws';
import { chatJob } from './completions.js';
import { numberHeader } from './http.js';
import type { SimModel } from './index.js';

type Obj = Record<string, unknown>;

const id = (prefix: string): string => `${prefix}_${randomBytes(8).toString('hex')}`;

/** Test controls, read from the upgrade's headers. */
interface Controls {
  /** Milliseconds between streamed tokens (x-sim-token-delay-ms). */
  delayMs: number;
  /** x-sim-close-after: the socket is cut (no close frame) after this many text deltas in the session. */
  closeAfter: number | null;
  /** x-sim-audio-tokens: `IN,OUT` audio tokens added to every response's reported usage. */
  audioTokens: [number, number];
  /** x-sim-cached-tokens: this many of every response's input tokens reported as cached. */
  cachedTokens: number;
}

function refuse(socket: Duplex, status: number, message: string, code: string | null): void {
  const body = JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code } });
  socket.end(`HTTP/1.1 ${status} ${status === 404 ? 'Not Found' : 'Bad Request'}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}

/** Serves `/v1/realtime?model=<a chat model>` upgrades on the sim's HTTP server; `close` ends every session. */
export function attachRealtime(server: http.Server, models: ReadonlyMap<string, SimModel>, defaultDelayMs: number): { close(): void } {
  const wss = new WebSocketServer({ noServer: true, maxPayload: 16 * 1024 * 1024, perMessageDeflate: false });
  const open = new Set<WebSocket>();
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://sim');
    if (url.pathname !== '/v1/realtime') { refuse(socket, 404, `Invalid URL (GET ${url.pathname})`, null); return; }
    const name = url.searchParams.get('model') ?? '';
    const model = models.get(name);
    if (!model || model.kind !== 'chat') { refuse(socket, 404, `The model \`${name}\` does not exist.`, 'model_not_found'); return; }
    const delay = numberHeader(req, 'x-sim-token-delay-ms');
    const closeAfter = numberHeader(req, 'x-sim-close-after');
    const audio = String(req.headers['x-sim-audio-tokens'] ?? '0,0').split(',').map((x) => Math.max(0, Math.floor(Number(x) || 0)));
    const controls: Controls = {
      delayMs: delay !== null && delay >= 0 ? delay : defaultDelayMs, closeAfter: closeAfter !== null && closeAfter >= 0 ? Math.floor(closeAfter) : null,
      audioTokens: [audio[0] ?? 0, audio[1] ?? 0], cachedTokens: Math.max(0, Math.floor(numberHeader(req, 'x-sim-cached-tokens') ?? 0)),
    };
    wss.handleUpgrade(req, socket, head, (ws) => {
      open.add(ws);
      ws.on('close', () => open.delete(ws));
      new SimRealtime(ws, model, controls);
    });
  });
  return { close: () => { for (const ws of open) ws.terminate(); wss.close(); } };
}

interface Active { id: string; cancelled: boolean }

class SimRealtime {
  private readonly session: Obj;
  private readonly items: Obj[] = [];
  private active: Active | null = null;
  private deltas = 0;

  constructor(private readonly ws: WebSocket, private readonly model: SimModel, private readonly c: Controls) {
    this.session = {
      type: 'realtime', object: 'realtime.session', id: id('sess'), model: model.id, output_modalities: ['text'], instructions: '',
      audio: { input: { format: { type: 'audio/pcm', rate: 24000 }, transcription: null, turn_detection: null }, output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'alloy' } },
      tools: [], tool_choice: 'auto', max_output_tokens: 'inf',
    };
    ws.on('message', (data, isBinary) => this.message(Buffer.isBuffer(data) ? data : Buffer.from(data as ArrayBuffer), isBinary));
    ws.on('error', () => undefined);
    this.send({ type: 'session.created', session: this.session });
  }

  private send(ev: Obj): void {
    if (this.ws.readyState === 1) this.ws.send(JSON.stringify({ event_id: id('event'), ...ev }));
  }

  private error(code: string, message: string, param: string | null, eventId: unknown): void {
    this.send({ type: 'error', error: { type: 'invalid_request_error', code, message, param, event_id: typeof eventId === 'string' ? eventId : null } });
  }

  private message(data: Buffer, isBinary: boolean): void {
    let m: Obj;
    try {
      const v = JSON.parse(isBinary ? '' : data.toString('utf8')) as unknown;
      if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
      m = v as Obj;
    } catch { this.error('invalid_json', 'The event is not a JSON object.', null, null); return; }
    switch (m.type) {
      case 'session.update': {
        const u = (m.session ?? {}) as Obj;
        if (u.model !== undefined && u.model !== this.model.id) { this.error('invalid_value', 'The model of a session cannot be changed.', 'session.model', m.event_id); return; }
        for (const [k, v] of Object.entries(u)) if (v !== undefined && k !== 'id' && k !== 'object') this.session[k] = v;
        this.send({ type: 'session.updated', session: this.session });
        return;
      }
      case 'conversation.item.create': {
        const item = { id: id('item'), object: 'realtime.item', status: 'completed', ...((m.item ?? {}) as Obj) };
        const previous = this.items.length > 0 ? this.items[this.items.length - 1]!.id : null;
        this.items.push(item);
        this.send({ type: 'conversation.item.created', previous_item_id: previous, item });
        return;
      }
      case 'response.create': {
        const r = (m.response ?? {}) as Obj;
        const outOfBand = r.conversation === 'none';
        if (this.active && !outOfBand) {
          this.error('conversation_already_has_active_response', `Conversation already has an active response in progress: ${this.active.id}.`, null, m.event_id);
          return;
        }
        this.respond(r, outOfBand);
        return;
      }
      case 'response.cancel':
        if (!this.active) { this.error('response_cancel_not_active', 'There is no active response to cancel.', null, m.event_id); return; }
        this.active.cancelled = true;
        return;
      default:
        this.error('invalid_event', `The sim does not simulate ${JSON.stringify(m.type)} events.`, 'type', m.event_id);
    }
  }

  /** One text response: the sim's chat generation over the conversation, streamed a token per delta. */
  private respond(r: Obj, outOfBand: boolean): void {
    const a: Active = { id: id('resp'), cancelled: false };
    if (!outOfBand) this.active = a;
    const instructions = typeof r.instructions === 'string' ? r.instructions : String(this.session.instructions ?? '');
    const items = outOfBand ? (Array.isArray(r.input) ? r.input as Obj[] : []) : this.items;
    const messages: Obj[] = [];
    if (instructions) messages.push({ role: 'system', content: instructions });
    for (const it of items) {
      if (it.type !== undefined && it.type !== 'message') continue;
      const text = ((it.content ?? []) as Obj[]).map((p) => (typeof p.text === 'string' ? p.text : '')).join('');
      messages.push({ role: typeof it.role === 'string' ? it.role : 'user', content: text });
    }
    if (messages.length === 0) messages.push({ role: 'user', content: '' });
    const limit = r.max_output_tokens ?? this.session.max_output_tokens;
    const job = chatJob(this.model, { messages, ...(typeof limit === 'number' ? { max_tokens: limit } : {}) });
    const pieces = job.outputs[0]!.pieces;
    const item: Obj = { id: id('item'), object: 'realtime.item', type: 'message', role: 'assistant', status: 'in_progress', content: [] };
    const base = { response_id: a.id, item_id: item.id, output_index: 0, content_index: 0 };
    const response = (status: string, output: Obj[], usage: Obj | null, details: Obj | null): Obj => ({
      object: 'realtime.response', id: a.id, status, status_details: details, output, conversation_id: outOfBand ? null : this.session.id,
      output_modalities: ['text'], max_output_tokens: limit ?? 'inf', metadata: r.metadata ?? null, usage,
    });
    this.send({ type: 'response.created', response: response('in_progress', [], null, null) });
    this.send({ type: 'response.output_item.added', response_id: a.id, output_index: 0, item });
    this.send({ type: 'response.content_part.added', ...base, part: { type: 'text', text: '' } });
    let i = 0;
    const finish = () => {
      if (this.active === a) this.active = null;
      const text = pieces.slice(0, i).join('');
      const status = a.cancelled ? 'cancelled' : 'completed';
      Object.assign(item, { status: a.cancelled ? 'incomplete' : 'completed', content: [{ type: 'output_text', text }] });
      this.send({ type: 'response.output_text.done', ...base, text });
      this.send({ type: 'response.content_part.done', ...base, part: { type: 'text', text } });
      this.send({ type: 'response.output_item.done', response_id: a.id, output_index: 0, item });
      if (!outOfBand) this.items.push(item);
      this.send({ type: 'response.done', response: response(status, [item], this.usage(job.promptTokens, i), a.cancelled ? { type: 'cancelled', reason: 'client_cancelled' } : null) });
    };
    const step = () => {
      if (this.ws.readyState !== 1) return;
      if (a.cancelled || i >= pieces.length) { finish(); return; }
      this.send({ type: 'response.output_text.delta', ...base, delta: pieces[i++] });
      this.deltas++;
      if (this.c.closeAfter !== null && this.deltas >= this.c.closeAfter) { this.ws.terminate(); return; }
      if (this.c.delayMs > 0) setTimeout(step, this.c.delayMs); else setImmediate(step);
    };
    step();
  }

  /** The GA usage block: the prompt and the tokens streamed, plus the audio and cached tokens the test controls add. */
  private usage(prompt: number, output: number): Obj {
    const [audioIn, audioOut] = this.c.audioTokens;
    const input = prompt + audioIn;
    const cached = Math.min(this.c.cachedTokens, prompt);
    return {
      total_tokens: input + output + audioOut, input_tokens: input, output_tokens: output + audioOut,
      input_token_details: { cached_tokens: cached, text_tokens: prompt, audio_tokens: audioIn, image_tokens: 0,
        cached_tokens_details: { text_tokens: cached, audio_tokens: 0, image_tokens: 0 } },
      output_token_details: { text_tokens: output, audio_tokens: audioOut },
    };
  }
}

// One realtime response as a Part of the session: its worst case held, the chat model's stream relayed as realtime events, the reply spoken if asked, what was used settled, and the client told.
import { GatewayError } from '../../../errors.js';
import { Part } from '../../../exchange/part.js';
import { usage, type Usage } from '../../../exchange/usage.js';
import { SseMeter } from '../../../meter/sse.js';
import { chatPromptTokens } from '../../../meter/tokens.js';
import { callFor } from './calls.js';
import type { SessionContext } from './context.js';
import type { Plan } from './response-plan.js';
import { ResponseOutput, type Status } from './response-output.js';
import { Speaker, type SpeechResult } from './speech.js';
import type { Active } from './protocol.js';

const NOTHING_SPOKEN: SpeechResult = { characters: 0, audioOutMs: 0, failure: null };

/**
 * One response: hold its worst case (the prompt's bytes as tokens, the most output) as a part of the
 * session, relay the chat model's reply as realtime events (relayPart: each piece recorded on the
 * part before it is sent, so a process killed mid-response is billed by recovery for the usage at
 * its last record), speak it sentence by sentence as it streams when audio is asked for (each
 * sentence's characters held on the part), end the part with the tokens the upstream reported (what
 * was produced, if it broke) and the characters spoken, then tell the client, response.done carrying
 * the cost. Responses and transcriptions run one at a time (ctx.queue): the session's one running
 * record is always the latest part's.
 */
export async function respond(ctx: SessionContext, a: Active, plan: Plan): Promise<void> {
  // A session ending runs nothing more (a response queued behind a refused transcription, a dropped client's).
  if (ctx.ended) { ctx.active = null; return; }
  ctx.active = a;
  const { body, messages } = plan.build();
  const payload = Buffer.from(JSON.stringify(body));
  const out = new ResponseOutput(ctx, a, plan);
  let part: Part;
  try {
    // Each response is a billed unit: balance and ceiling checked again, and it takes a token of the key's rpm.
    part = await Part.begin(ctx.charge, { worst: usage({ inputTokens: payload.length, outputTokens: plan.maxOut, basis: 'estimated' }), countsAsRequest: true });
  } catch (e) {
    ctx.active = null;
    if (!(e instanceof GatewayError)) throw e;
    await ctx.emit(out.refused(e));
    return ctx.refused(e);
  }
  await ctx.emit({ type: 'response.created', response: out.response('in_progress', [], null) });
  const meter = new SseMeter({ stripUsageChunk: true, stripChunkUsage: false, promptTokens: () => chatPromptTokens(messages),
    translate: { start: () => '', done: () => '', chunk: (obj) => out.chunk(obj) } });
  // What the response would bill now: the tokens so far, and the characters and audio spoken so far.
  const soFar = (): Usage => ({ ...meter.usage(), ...(speaker?.soFar() ?? {}) });
  const speaker = plan.speech ? new Speaker(ctx, a, plan.speech, out.text, () => out.index(out.text), part, soFar) : null;
  if (speaker) out.speakTo((text) => speaker.push(text));
  // Each upstream of the model's pool gets the body with its own model name.
  const o = await callFor(ctx, a, { part, model: ctx.model, path: '/v1/chat/completions', accept: 'text/event-stream', body: (e) => withModel(payload, body, e.upstreamModel),
    requestId: `${ctx.socket.id}-${part.seq}`, meter, usage: soFar, send: (frames) => sendFrames(ctx, String(frames).split('\n')) });
  let failure = a.cancelled || a.dropped ? null : o.failure ?? speaker?.failure ?? null;
  const textDone = o.complete && !a.cancelled && !a.dropped && failure === null;
  // The rest of the reply spoken (whole), or the speaking stopped (the reply ended short).
  const speech = speaker ? await (textDone ? speaker.finish() : speaker.stop()) : NOTHING_SPOKEN;
  failure ??= speech.failure;
  // What was produced is billed, whatever became of the socket; nothing produced, nothing billed.
  const complete = textDone && failure === null;
  const tokens = o.produced || textDone ? meter.usage() : usage({ basis: 'exact' });
  const u: Usage = { ...tokens, characters: speech.characters, audioOutMs: speech.audioOutMs };
  const { cost } = await part.end(u, a.dropped ? { extra: { client_dropped: true } } : {});
  ctx.active = null;
  const status: Status = a.cancelled ? 'cancelled' : failure ? 'failed' : complete ? 'completed' : 'incomplete';
  const frames = out.closing(status, failure, u, cost);
  if (a.dropped) return;
  await sendFrames(ctx, frames);
  // A session ending (a sentence's hold refused) says why in its own last word.
  if (failure && !ctx.ended) await ctx.error(failure.code, failure.message, failure.param, null, failure.type);
}

async function sendFrames(ctx: SessionContext, frames: string[]): Promise<void> {
  for (const f of frames) if (f) await ctx.socket.send(f);
}

/** The chat body as built, or with another upstream's model name in it. */
function withModel(payload: Buffer, body: Record<string, unknown>, upstreamModel: string): Buffer {
  return body.model === upstreamModel ? payload : Buffer.from(JSON.stringify({ ...body, model: upstreamModel }));
}

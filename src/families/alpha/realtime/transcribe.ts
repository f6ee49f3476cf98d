// An audio turn (committed from the input buffer, or an input_audio part of a created item) transcribed by the transcription upstream, billed by its duration as its own part of the session.
import { GatewayError } from '../../../errors.js';
import { Part } from '../../../exchange/part.js';
import { usage, type Usage } from '../../../exchange/usage.js';
import { wav } from '../../../audio/pcm.js';
import { buildForm, formBoundary } from '../../../proxy/form.js';
import type { PoolEntry } from '../../../config.js';
import type { RoutedCall } from '../../../proxy/routed.js';
import { alpha } from '../family.js';
import type { SessionContext } from './context.js';
import { BYTES_PER_MS, RATE, type Item, type Obj } from './protocol.js';

/** The most transcription JSON read from an upstream. */
const MAX_TRANSCRIPT_BYTES = 1 << 20;

/**
 * Transcribes a turn (the audio of `item`'s content part `contentIndex`) with the transcription
 * upstream (a WAV of it), billed by its duration as its own part of the session; the transcript is
 * the part's. Failed: nothing billed, a `...transcription.failed` event.
 */
export async function transcribe(ctx: SessionContext, item: Item, pcm: Buffer, contentIndex = 0): Promise<boolean> {
  const stt = ctx.audio.stt!;
  const u: Usage = usage({ audioInMs: Math.floor(pcm.length / BYTES_PER_MS), basis: 'exact' });
  const failed = (e: GatewayError) => ctx.emit({ type: 'conversation.item.input_audio_transcription.failed', item_id: item.id, content_index: contentIndex,
    error: { type: e.type, code: e.code, message: e.message, param: e.param ?? null } });
  let part: Part;
  try {
    part = await Part.begin(ctx.charge, { worst: u, reason: 'realtime.transcription' });
  } catch (e) {
    if (!(e instanceof GatewayError)) throw e;
    await failed(e);
    await ctx.refused(e);
    return false;
  }
  const id = `${ctx.socket.id}-${part.seq}`;
  const t = ((ctx.session.audio as { input: Obj }).input.transcription as Obj | null) ?? {};
  // The form for each upstream of the pool, naming the model as that upstream knows it (upstream_model of its entry), under one content type.
  const boundary = formBoundary();
  const audio = wav(pcm, RATE);
  const form = {
    contentType: `multipart/form-data; boundary=${boundary}`,
    body: (e: PoolEntry) => buildForm([
      { name: 'model', value: e.upstreamModel }, { name: 'response_format', value: 'json' },
      ...(typeof t.language === 'string' ? [{ name: 'language', value: t.language }] : []),
      ...(typeof t.prompt === 'string' ? [{ name: 'prompt', value: t.prompt }] : []),
      { name: 'file', filename: 'turn.wav', contentType: 'audio/wav', data: audio },
    ], boundary).body,
  };
  let text: string | null = null;
  let failure: GatewayError | null = null;
  let call: RoutedCall | undefined;
  try {
    // Over the model's pool, as an HTTP transcription is (retry rule, health, protection); its slot freed once the reply is read.
    call = ctx.s.upstreams.route({ pool: stt.pool, method: 'POST', path: '/v1/audio/transcriptions', headers: { ...ctx.headers, 'content-type': form.contentType, accept: 'application/json' },
      body: form.body, requestId: id });
    const res = await call.response;
    if (res.statusCode !== 200) {
      failure = await alpha.upstreamError(res, id);
    } else {
      const parts: Buffer[] = [];
      let size = 0;
      for await (const c of res) {
        size += (c as Buffer).length;
        if (size > MAX_TRANSCRIPT_BYTES) { call.abort(); break; }
        parts.push(c as Buffer);
      }
      const j = JSON.parse(Buffer.concat(parts).toString('utf8')) as Obj;
      if (typeof j.text !== 'string') throw new Error('no text');
      text = j.text;
    }
  } catch (e) {
    failure = e instanceof GatewayError ? e : new GatewayError({ status: 502, code: 'upstream_error', message: 'The transcription upstream failed or answered without a transcript.' });
  } finally {
    call?.finish?.();
  }
  if (text === null) {
    await part.end(usage({ basis: 'exact' }));
    await failed(failure ?? new GatewayError({ status: 502, code: 'upstream_error', message: 'The transcription upstream failed.' }));
    return false;
  }
  await part.end(u, { extra: { transcription: stt.id } });
  (item.content![contentIndex] as Obj).transcript = text;
  await ctx.emit({ type: 'conversation.item.input_audio_transcription.completed', item_id: item.id, content_index: contentIndex, transcript: text,
    usage: { type: 'duration', seconds: u.audioInMs / 1000 } });
  return true;
}

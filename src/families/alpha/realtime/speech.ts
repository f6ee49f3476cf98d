// A realtime response's reply spoken: its characters held, the speech upstream's 24 kHz PCM streamed as output_audio deltas.
import { GatewayError } from '../../../errors.js';
import { usage } from '../../../exchange/usage.js';
import { presetVoice } from '../../../resolve/voices.js';
import { callFor } from './calls.js';
import type { SessionContext } from './context.js';
import { BYTES_PER_MS, POLICY, type Active, type Item } from './protocol.js';

/**
 * Speaks a finished reply: holds its characters (402 ends the session like any billed unit), asks
 * the speech upstream for 24 kHz PCM, and streams it as output_audio deltas. The characters are
 * billed once the upstream accepted them (a 200), as the speech routes bill them; the audio
 * delivered is recorded (audio out, priced only where the session model sets an audio_out price).
 */
export async function speak(ctx: SessionContext, a: Active, voice: { voice: string; speed: number }, item: Item, outputIndex: number, textOut: string, seq: number):
  Promise<{ characters: number; audioOutMs: number; held: bigint; failure: GatewayError | null }> {
  const tts = ctx.audio.tts!;
  const characters = [...textOut].length;
  const held = ctx.charge.cost(usage({ characters, basis: 'exact' }));
  try {
    await ctx.charge.extend(held);
  } catch (e) {
    if (!(e instanceof GatewayError)) throw e;
    ctx.end(POLICY, e.code);
    return { characters: 0, audioOutMs: 0, held: 0n, failure: e };
  }
  const req = { model: tts.upstreamModel, input: textOut, voice: presetVoice(voice.voice)?.upstreamVoice ?? voice.voice, response_format: 'pcm', speed: voice.speed };
  let bytes = 0;
  let accepted = false;
  let whole = false;
  let failure: GatewayError | null = null;
  try {
    const { call, res, failed } = await callFor(ctx, a, tts.upstream, '/v1/audio/speech', '*/*', Buffer.from(JSON.stringify(req)), `${ctx.socket.id}-${seq}-speech`);
    failure = failed;
    if (res) {
      accepted = true;
      let odd: Buffer | null = null;
      for await (const chunk of res) {
        let c = chunk as Buffer;
        if (odd) { c = Buffer.concat([odd, c]); odd = null; }
        if (c.length % 2) { odd = c.subarray(c.length - 1); c = c.subarray(0, c.length - 1); }
        if (c.length === 0) continue;
        bytes += c.length;
        if (!a.dropped) await ctx.emit({ type: 'response.output_audio.delta', response_id: a.id, item_id: item.id, output_index: outputIndex, content_index: 0, delta: c.toString('base64') });
        if (a.cancelled || a.dropped) { call.abort(); break; }
      }
      whole = res.complete && !a.cancelled && !a.dropped;
      if (!a.cancelled && !a.dropped && !res.complete) failure = new GatewayError({ status: 502, code: 'upstream_error', message: 'The speech upstream broke off mid-reply.' });
    }
  } catch (e) {
    if (!a.cancelled && !a.dropped) failure = e instanceof GatewayError ? e : new GatewayError({ status: 502, code: 'upstream_error', message: 'The speech upstream failed.' });
  }
  // What was spoken, for conversation.item.truncate.
  if (accepted) ctx.spoken.set(item.id, [...(ctx.spoken.get(item.id) ?? []), { text: textOut, ms: Math.floor(bytes / BYTES_PER_MS), cut: !whole }]);
  if (!a.dropped && accepted) await ctx.emit({ type: 'response.output_audio.done', response_id: a.id, item_id: item.id, output_index: outputIndex, content_index: 0 });
  return { characters: accepted ? characters : 0, audioOutMs: Math.floor(bytes / BYTES_PER_MS), held, failure };
}

// A stream-input session's generations, one at a time, each a Part of the session: its text's price held, its audio relayed frame by frame as the upstream makes it, settled for what was spoken.
import type { Services } from '../../services.js';
import type { PoolEntry } from '../../config.js';
import { CLOSE, GatewayError } from '../../errors.js';
import { Part } from '../../exchange/part.js';
import { relayPart } from '../../exchange/relay-part.js';
import { usage } from '../../exchange/usage.js';
import { nd, type Nanodollars } from '../../money.js';
import { log } from '../../observe/log.js';
import { beta } from './family.js';
import type { GenerationStream } from './produce.js';
import type { SpeechSession, VoiceFields } from './speech-stream.js';
import { SpokenMeter, type FrameWriter } from './spoken.js';

/** Close codes a generation ends a session with: 1001 going away (skipped), 1008 a refusal (balance, ceiling, rpm), 1011 the upstream failed. */
const { GOING_AWAY, POLICY, INTERNAL: UPSTREAM_FAILED } = CLOSE;

/** A generation's end: done (and what it cost), or the session must close with `code` (`refusal`: the admission's error, for the family's message). */
export type Generated =
  | { ok: true; cost: Nanodollars }
  | { ok: false; code: number; reason: string; cost: Nanodollars; refusal?: GatewayError };

/** Where a generation's frames go: how the socket writes one, and the send (which waits for a slow client). */
export interface FrameOut {
  frame: FrameWriter;
  send(out: string): Promise<void>;
  /** Aborts when the session's end cancels what is under way (the client left): the generation stops and is billed what it sent. */
  readonly signal?: AbortSignal;
}

/**
 * Runs a session's generations one at a time: a session keeps one running record (the limiter keeps
 * one per hold), and it then always belongs to the generation under way.
 */
export class Generations {
  private chain: Promise<unknown> = Promise.resolve();
  private stopped = false;
  /** Generations queued and not yet delivered. */
  queued = 0;

  constructor(private readonly s: Services, private readonly sessionId: string, private readonly headers: Record<string, string>) {}

  /** Generations queued from now on, or not yet started, do not run (the session is ending). */
  stop(): void { this.stopped = true; }

  /** Resolves once every queued generation has run (and been billed). */
  idle(): Promise<void> { return this.chain.then(() => undefined); }

  /**
   * Queues a generation after those already queued, its audio made as the next piece of `audio` and
   * sent frame by frame to `out`; `deliver` then hears how it ended, and the next one starts only once
   * it has (a slow client holds the generations back). Resolves once delivered.
   */
  run(session: SpeechSession, audio: GenerationStream, text: string, voice: VoiceFields, out: FrameOut, deliver: (g: Generated) => Promise<void>): Promise<void> {
    this.queued++;
    const skipped: Generated = { ok: false, code: GOING_AWAY, reason: '', cost: nd(0n) };
    const run = this.chain.then(() => (this.stopped ? skipped : this.generate(session, audio, text, voice, out))).then(deliver).finally(() => { this.queued--; });
    this.chain = run.catch(() => undefined);
    return run;
  }

  /**
   * Begins the generation as a part of the session (its characters' price held: balance, ceiling and
   * an rpm token checked again; refused, the session is told and closed), asks the voice's pool for it as
   * the REST routes do (PCM, made into the format by production()), and relays its audio as it comes,
   * each frame recorded before it is sent. Ends the part: the whole text when the upstream finished;
   * the characters of the frames sent when it broke off (a process killed mid-way is billed the same
   * by recovery, from the last record); nothing when it produced nothing.
   */
  private async generate(session: SpeechSession, stream: GenerationStream, text: string, voice: VoiceFields, out: FrameOut): Promise<Generated> {
    const { charge, target, plan, extra, pace } = session;
    if (!charge.isOpen) return { ok: false, code: GOING_AWAY, reason: '', cost: nd(0n) };
    const characters = [...text].length;
    let part: Part;
    try {
      // Each generation is a billed unit: it counts against the key's rpm as a request does.
      part = await Part.begin(charge, { worst: usage({ characters, basis: 'exact' }), known: true, countsAsRequest: true });
    } catch (e) {
      if (e instanceof GatewayError) return { ok: false, code: POLICY, reason: `${e.code}: ${e.message}`, cost: nd(0n), refusal: e };
      throw e;
    }
    // the socket's (context's) stream: Opus generations continue one Ogg stream (produce.ts)
    const meter = new SpokenMeter(text, stream.generation(), plan.pcmRate, pace.msPerChar, out.frame);
    const requestId = `${this.sessionId}-${part.seq}`;
    let outcome;
    try {
      // Over the voice's upstreams of the model's pool, as the REST route is: each upstream's model name and its own id of the voice in its body.
      const body = (e: PoolEntry) => Buffer.from(JSON.stringify({ ...extra, ...voice, model: e.upstreamModel, input: text, voice: target.places.voiceAt(e.name), response_format: plan.upstreamFormat }));
      const call = this.s.upstreams.route({ pool: target.places.pool, method: 'POST', path: '/v1/audio/speech', headers: { ...this.headers, 'content-type': 'application/json', accept: '*/*' },
        body, requestId });
      outcome = await relayPart({ part, call, meter, recordEach: true, idleMs: this.s.upstreams.config(target.model.upstream).timeoutMs,
        upstreamError: (res) => beta.upstreamError(res, this.sessionId), send: (frame) => out.send(String(frame)), signal: out.signal });
    } catch (e) {
      // The call could not start: nothing was produced, the part gives its hold back.
      await part.end(usage({ basis: 'exact' }));
      throw e;
    }
    const { cost } = await part.end(outcome.usage, outcome.cancelled ? { extra: { client_dropped: true } } : {});
    // The client left: the session is ending already; what was sent is what was billed.
    if (outcome.cancelled) return { ok: false, code: GOING_AWAY, reason: '', cost };
    if (outcome.complete) {
      pace.learn(meter.spokenMs, characters);
      return { ok: true, cost };
    }
    const failure = outcome.failure;
    log('warn', 'stream-input generation failed', { session: this.sessionId, error: failure?.message ?? 'incomplete' });
    const billed = outcome.produced ? `the ${outcome.usage.characters} characters of the audio it sent were billed` : 'nothing was billed for this text';
    return { ok: false, code: UPSTREAM_FAILED, reason: `${failure?.code ?? 'upstream_error'}: the speech upstream failed; ${billed}.`, cost };
  }
}

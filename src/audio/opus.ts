// Ogg Opus from S16LE mono PCM: libopus 1.4 (opusscript's WebAssembly build) in 20 ms frames, in Ogg pages as RFC 7845 has them.
import { createRequire } from 'node:module';
import { OggWriter, opusHead, opusTags, type Packet } from './ogg.js';
import { StreamResampler } from './pcm.js';

/** The parts of opusscript's emscripten module used here (its exports, as its own index.js calls them). */
interface NativeHandler {
  _encode(input: number, bytes: number, output: number, frameSize: number): number;
  _encoder_ctl(ctl: number, arg: number): number;
}
interface NativeModule {
  HEAPU8: Uint8Array;
  HEAPU16: Uint16Array;
  _malloc(bytes: number): number;
  _free(ptr: number): void;
  OpusScriptHandler: { new (rate: number, channels: number, application: number): NativeHandler; destroy_handler(h: NativeHandler): void };
}

/**
 * The module is used directly, not through opusscript's `OpusScript.encode`: that copies the PCM to
 * twice the address it allocated (its view indexes 16-bit words by a byte address), so it writes over
 * other allocations, and fails with a RangeError once the WebAssembly heap has grown past twice that
 * address (many encoders at once). Here each encoder allocates its own input block and views the heap
 * afresh on every frame (a grown heap replaces the old views).
 */
let native: NativeModule | undefined;
function opusModule(): NativeModule {
  if (!native) {
    const make = createRequire(import.meta.url)('opusscript/build/opusscript_native_wasm.js') as () => NativeModule;
    native = make(); // instantiated synchronously under Node
  }
  return native;
}

const OPUS_APPLICATION_AUDIO = 2049;
const OPUS_SET_BITRATE = 4002;
/** The largest packet opus_encode writes (3 × 1275 + 3, as the module's own buffer). */
const MAX_PACKET = 3828;
/** The rates libopus encodes at; any other input is resampled to 48 kHz first. */
const NATIVE_RATES: readonly number[] = [8_000, 12_000, 16_000, 24_000, 48_000];
/**
 * libopus's look-ahead, in 48 kHz samples, at every rate (Fs/400 of delay compensation plus Fs/250 of
 * analysis: 6.5 ms). The pre-skip tells the decoder to drop it, so the decoded audio starts with the input.
 */
const PRE_SKIP = 312;
const FRAME_48K = 960;

interface Native { handler: NativeHandler; input: number; output: number }
const release = (n: Native): void => {
  const m = opusModule();
  m.OpusScriptHandler.destroy_handler(n.handler);
  m._free(n.input); m._free(n.output);
};
/** A backstop for an encoder dropped without `end()` or `close()` (the heap is not collected by V8). */
const finalizer = new FinalizationRegistry<Native>(release);

/**
 * A streaming Ogg Opus encoder: `push` takes samples at the input rate and returns the pages of the
 * whole 20 ms frames they complete; `end` pads the last frame, flushes the encoder's look-ahead and
 * closes the stream with the exact end granule (the decoder trims the padding). `close` frees the
 * encoder's WebAssembly memory without finishing (a client that left); `end` does it too.
 */
export class OpusEncoder {
  private readonly rate: number;
  private readonly frame: number;
  private resampler: StreamResampler | undefined;
  private readonly ogg = new OggWriter();
  private native: Native | undefined;
  private pending: Int16Array;
  private fill = 0;
  /** Samples (at `rate`) received, and frames encoded. */
  private samples = 0;
  private frames = 0;
  private started = false;
  private closed = false;

  constructor(private readonly inputRate: number, private readonly kbps = 64, private readonly tags: Readonly<Record<string, string>> = {}) {
    this.rate = NATIVE_RATES.includes(inputRate) ? inputRate : 48_000;
    this.resampler = this.rate === inputRate ? undefined : new StreamResampler(inputRate, this.rate);
    this.frame = this.rate / 50;
    this.pending = new Int16Array(this.frame);
    if (!(kbps >= 6 && kbps <= 510)) throw new Error(`opus: bit rate ${kbps} kbit/s is outside 6–510`);
  }

  /** The libopus encoder, made at the first frame (an encoder never fed holds no WebAssembly memory). */
  private open(): Native {
    if (this.native) return this.native;
    if (this.closed) throw new Error('opus: the encoder is closed');
    const m = opusModule();
    const handler = new m.OpusScriptHandler(this.rate, 1, OPUS_APPLICATION_AUDIO);
    // the module takes each input byte as a 16-bit word and packs them in place, reading twice as many
    // words as the bytes it is given: 8 bytes per sample keep every read and write inside the block
    const n: Native = { handler, input: m._malloc(this.frame * 8), output: m._malloc(MAX_PACKET) };
    this.native = n;
    finalizer.register(this, n, this);
    const err = handler._encoder_ctl(OPUS_SET_BITRATE, this.kbps * 1000);
    if (err < 0) { this.close(); throw new Error(`opus: bit rate ${this.kbps} kbit/s refused (${err})`); }
    return n;
  }

  push(input: Int16Array): Buffer {
    const head = this.start();
    const packets = this.take(this.resampler ? this.resampler.push(input) : input);
    return Buffer.concat([head, this.ogg.pages(packets)]);
  }

  end(): Buffer {
    const head = this.start();
    const packets = this.resampler ? this.take(this.resampler.end()) : [];
    // every decoded sample counts in the granule, the pre-skip included
    const total = PRE_SKIP + this.samples * (48_000 / this.rate);
    while (this.frames * FRAME_48K < total || packets.length === 0) {
      // (after a boundary() every sample is in a packet already: one silent packet, trimmed by the end granule, carries the end of the stream)
      this.pending.fill(0, this.fill);
      this.fill = 0;
      packets.push(this.encode(this.pending));
    }
    packets[packets.length - 1]!.granule = BigInt(total);
    const pages = this.ogg.pages(packets, true);
    this.close();
    return Buffer.concat([head, pages]);
  }

  /**
   * Ends one piece of audio without ending the stream (a stream-input generation): pads it with silence
   * until every sample pushed so far, libopus's look-ahead included, is in a packet, and returns the pages
   * of those packets. The stream goes on with the next push: one Ogg stream, one serial, granules growing;
   * the silence (under 27 ms) is part of the stream, between this piece and the next.
   */
  boundary(): Buffer {
    const head = this.start();
    if (this.resampler) {
      // the resampler's remainder belongs to this piece; the next piece starts a new one
      const rest = this.take(this.resampler.end());
      this.resampler = new StreamResampler(this.inputRate, this.rate);
      if (rest.length > 0) return Buffer.concat([head, this.ogg.pages(rest), this.boundary()]);
    }
    // libopus's output lags its input by the look-ahead: the piece is all out once its samples and the
    // look-ahead have been pushed, on a whole frame. What then decodes (the pre-skip dropped) is the
    // pushed samples less the look-ahead: that is the stream's length so far, its silence included.
    const lookAhead = (PRE_SKIP * this.rate) / 48_000;
    const pushed = this.frames * this.frame + this.fill;
    const target = Math.ceil((this.samples + lookAhead) / this.frame) * this.frame;
    const packets = this.take(new Int16Array(target - pushed));
    this.samples = target - lookAhead;
    return Buffer.concat([head, this.ogg.pages(packets)]);
  }

  /** Frees the encoder (idempotent); pushing afterwards throws. */
  close(): void {
    this.closed = true;
    if (!this.native) return;
    finalizer.unregister(this);
    release(this.native);
    this.native = undefined;
  }

  private start(): Buffer {
    if (this.started) return Buffer.alloc(0);
    this.started = true;
    return Buffer.concat([this.ogg.header(opusHead(PRE_SKIP, this.inputRate)), this.ogg.header(opusTags('tollgate (libopus 1.4)', this.tags))]);
  }

  /** Adds samples at `rate`; encodes every frame they complete. */
  private take(s: Int16Array): Packet[] {
    const out: Packet[] = [];
    this.samples += s.length;
    let i = 0;
    while (i < s.length) {
      const n = Math.min(this.frame - this.fill, s.length - i);
      this.pending.set(s.subarray(i, i + n), this.fill);
      this.fill += n; i += n;
      if (this.fill === this.frame) { this.fill = 0; out.push(this.encode(this.pending)); }
    }
    return out;
  }

  private encode(frame: Int16Array): Packet {
    const n = this.open();
    const m = opusModule();
    const bytes = new Uint8Array(frame.buffer, frame.byteOffset, frame.byteLength);
    m.HEAPU16.set(bytes, n.input >> 1);
    const len = n.handler._encode(n.input, bytes.length, n.output, this.frame);
    if (len < 0) throw new Error(`opus: encode failed (${len})`);
    this.frames++;
    return { data: Buffer.from(m.HEAPU8.subarray(n.output, n.output + len)), granule: BigInt(this.frames * FRAME_48K) };
  }
}

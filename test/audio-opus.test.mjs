// src/audio's Ogg Opus (libopus through opusscript's WebAssembly): RFC 7845 framing, real sound at the asked bit rate,
// the exact duration, the same packets however the PCM is read, and many encoders alive at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { parseBuffer } from 'music-metadata';
import { encodeAudio, audioEncoder, OpusEncoder } from '../dist/audio/index.js';

let ffmpeg = true;
try { execFileSync('ffmpeg', ['-version'], { stdio: 'ignore' }); } catch { ffmpeg = false; }

/** A gliding tone (speech-like: the pitch moves), S16LE mono. */
function glide(seconds, rate, amp = 8000) {
  const pcm = Buffer.alloc(Math.round(seconds * rate) * 2);
  let phase = 0;
  for (let i = 0; i < pcm.length / 2; i++) {
    phase += (2 * Math.PI * (180 + 120 * Math.sin(i / rate * 3))) / rate;
    pcm.writeInt16LE(Math.round(Math.sin(phase) * amp), i * 2);
  }
  return pcm;
}

/** Pages (flags, granule) and packets of an Ogg stream, the CRC left to the decoders. */
function oggPackets(buf) {
  const pages = [];
  const packets = [];
  let cur = [];
  for (let p = 0; p < buf.length;) {
    assert.equal(buf.toString('latin1', p, p + 4), 'OggS', `page at ${p}`);
    const flags = buf[p + 5];
    const granule = buf.readBigUInt64LE(p + 6);
    const n = buf[p + 26];
    const lacing = [...buf.subarray(p + 27, p + 27 + n)];
    let q = p + 27 + n;
    for (const l of lacing) {
      cur.push(buf.subarray(q, q + l)); q += l;
      if (l < 255) { packets.push(Buffer.concat(cur)); cur = []; }
    }
    pages.push({ flags, granule });
    p = q;
  }
  return { pages, packets };
}

function rms(pcm) {
  let s = 0;
  for (let i = 0; i < pcm.length / 2; i++) s += pcm.readInt16LE(i * 2) ** 2;
  return Math.sqrt(s / (pcm.length / 2));
}

test('Ogg Opus is RFC 7845 framed: OpusHead with pre-skip, OpusTags, 20 ms packets, granules at 48 kHz, one end-of-stream page', () => {
  for (const rate of [24_000, 22_050, 16_000, 48_000]) {
    const seconds = 1.234;
    const samples = Math.round(seconds * rate);
    const { pages, packets } = oggPackets(encodeAudio('opus', glide(seconds, rate), { inRate: rate, tags: { title: 'x' } }));
    assert.equal(packets[0].toString('latin1', 0, 8), 'OpusHead');
    const preSkip = packets[0].readUInt16LE(10);
    assert.equal(preSkip, 312, 'libopus look-ahead');
    assert.equal(packets[0].readUInt32LE(12), rate, 'the input rate is declared');
    assert.equal(packets[1].toString('latin1', 0, 8), 'OpusTags');
    assert.match(packets[1].toString('utf8'), /TITLE=x/);
    const end = preSkip + Math.floor((samples * 48_000) / rate);
    const audio = packets.slice(2);
    // every packet is one 20 ms frame (RFC 6716 §3.1: the TOC's config gives the frame size, code 0 one frame)
    const ms = (toc) => { const c = toc >> 3; return c < 12 ? [10, 20, 40, 60][c & 3] : c < 16 ? [10, 20][c & 1] : [2.5, 5, 10, 20][c & 3]; };
    assert.ok(audio.every((p) => ms(p[0]) === 20 && (p[0] & 3) === 0), 'one 20 ms frame per packet');
    assert.equal(audio.length, Math.ceil(end / 960), `${rate}: frames cover the pre-skip and the audio`);
    assert.equal(pages[0].flags, 2, 'first page opens the stream');
    assert.equal(pages.at(-1).flags, 4, 'last page ends it');
    assert.ok(pages.slice(1, -1).every((p) => p.flags === 0));
    assert.equal(pages.at(-1).granule, BigInt(end), `${rate}: the end granule trims the padding`);
    for (let i = 1; i < pages.length; i++) assert.ok(pages[i].granule >= pages[i - 1].granule, 'granules never go back');
  }
});

test('Ogg Opus carries sound at the asked bit rate (silence stays tiny), and music-metadata reads Opus of the exact duration', async () => {
  for (const kbps of [32, 64, 96, 128, 192]) {
    const buf = encodeAudio('opus', glide(2, 24_000), { inRate: 24_000, kbps });
    const { packets } = oggPackets(buf);
    const bits = packets.slice(2).reduce((n, p) => n + p.length * 8, 0);
    const rate = bits / 2 / 1000;
    assert.ok(rate > kbps * 0.7 && rate < kbps * 1.3, `${kbps} kbit/s asked, ${rate.toFixed(1)} made`);
    const m = await parseBuffer(buf, { mimeType: 'audio/ogg' });
    assert.equal(m.format.container, 'Ogg');
    assert.equal(m.format.codec, 'Opus');
    assert.equal(m.format.duration, 2);
  }
  const silence = oggPackets(encodeAudio('opus', Buffer.alloc(48_000 * 2), { inRate: 24_000, kbps: 64 })).packets.slice(2);
  assert.ok(silence.every((p) => p.length <= 8), 'digital silence codes to a few bytes a frame');
});

test('ffmpeg decodes the Opus back to the input: exact length, same loudness, aligned (the pre-skip is right)', { skip: !ffmpeg && 'ffmpeg not installed' }, () => {
  for (const rate of [24_000, 22_050]) {
    const pcm = glide(1.5, rate);
    const dec = execFileSync('ffmpeg', ['-v', 'error', '-f', 'ogg', '-i', 'pipe:0', '-f', 's16le', '-ac', '1', '-ar', String(rate), 'pipe:1'],
      { input: encodeAudio('opus', pcm, { inRate: rate, kbps: 96 }), maxBuffer: 1 << 26 });
    assert.ok(Math.abs(dec.length - pcm.length) <= 4, `${rate}: ${dec.length} bytes decoded for ${pcm.length}`);
    assert.ok(Math.abs(rms(dec) / rms(pcm) - 1) < 0.1, `${rate}: loudness ${rms(dec).toFixed(0)} for ${rms(pcm).toFixed(0)}`);
    // correlation at lag 0 beats every other lag within ±10 ms: no offset
    const corr = (lag) => { let c = 0; for (let i = 500; i < pcm.length / 2 - 500; i++) c += pcm.readInt16LE(i * 2) * dec.readInt16LE((i + lag) * 2); return c; };
    const at0 = corr(0);
    assert.ok(at0 > 0.8 * pcm.length / 2 * rms(pcm) ** 2, `${rate}: decoded audio follows the input`);
    for (const lag of [-240, -60, -12, 12, 60, 240]) assert.ok(corr(lag) < at0, `${rate}: lag ${lag}`);
  }
});

test('a streamed Opus encoder (odd-sized reads) makes the same packets as a whole-buffer one', () => {
  for (const rate of [24_000, 22_050]) {
    const pcm = glide(0.77, rate);
    const e = audioEncoder('opus', { inRate: rate });
    const parts = [];
    for (let i = 0; i < pcm.length; i += 1001) parts.push(e.push(pcm.subarray(i, i + 1001)));
    parts.push(e.end());
    const a = oggPackets(Buffer.concat(parts));
    const b = oggPackets(encodeAudio('opus', pcm, { inRate: rate }));
    assert.deepEqual(a.packets, b.packets, `${rate}`);
    assert.equal(a.pages.at(-1).granule, b.pages.at(-1).granule);
  }
});

test('hundreds of Opus encoders alive at once (the WebAssembly heap grows) all encode correctly; a closed one refuses', () => {
  const pcm = glide(0.1, 24_000);
  const alone = encodeAudio('opus', pcm, { inRate: 24_000 });
  const many = Array.from({ length: 400 }, () => new OpusEncoder(24_000));
  const firsts = many.map((e) => e.push(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length / 2)));
  const outs = many.map((e, i) => Buffer.concat([firsts[i], e.end()]));
  for (const o of outs) assert.ok(o.equals(alone));
  const c = new OpusEncoder(24_000);
  c.push(new Int16Array(960));
  c.close(); c.close();
  assert.throws(() => c.push(new Int16Array(960)), /closed/);
});

// Test audio: one WAV writer (16-bit mono PCM) for every test that uploads or streams a WAV file.

/** A 16-bit mono WAV file around `pcm` (S16LE samples) at `rate`. */
export function wavFile(pcm, rate = 16_000) {
  const h = Buffer.alloc(44);
  h.write('RIFF', 0); h.writeUInt32LE(36 + pcm.length, 4); h.write('WAVE', 8); h.write('fmt ', 12);
  h.writeUInt32LE(16, 16); h.writeUInt16LE(1, 20); h.writeUInt16LE(1, 22); h.writeUInt32LE(rate, 24);
  h.writeUInt32LE(rate * 2, 28); h.writeUInt16LE(2, 32); h.writeUInt16LE(16, 34); h.write('data', 36); h.writeUInt32LE(pcm.length, 40);
  return Buffer.concat([h, pcm]);
}

/**
 * A WAV of `seconds` at `rate`: a sine of amplitude `amp` advancing `step` radians a sample (a different
 * step makes a different file with the same length), or silence with `amp: 0`.
 */
export function wav(seconds, { rate = 16_000, amp = 5000, step = 1 / 9 } = {}) {
  const n = Math.round(seconds * rate);
  const pcm = Buffer.alloc(n * 2);
  if (amp !== 0) for (let i = 0; i < n; i++) pcm.writeInt16LE(Math.round(amp * Math.sin(i * step)), i * 2);
  return wavFile(pcm, rate);
}

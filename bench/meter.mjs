// The stream meter alone: a chat stream as `sim` sends it (one id, 100 token chunks, the finish chunk and
// [DONE]) fed through SseMeter, 5,000 streams a round; ns per chunk. Results: docs/benchmarks.md, "The stream
// meter in one pass".
//   node bench/meter.mjs [--dist PATH] [--same]
// --dist: another build's dist/ (an A/B); --same: the stream already names our model (nothing renamed).
import { resolve, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from './lib.mjs';

const args = process.argv.slice(2);
const DIST = resolve(args.includes('--dist') ? args[args.indexOf('--dist') + 1] : join(ROOT, 'dist'));
const RENAME = !args.includes('--same');
const { SseMeter } = await import(pathToFileURL(join(DIST, 'meter/sse.js')).href);

const words = ['mirror', 'quiet', 'river', 'stone', 'lamp', 'the', 'of', 'and'];
const chunk = (delta, finish) => Buffer.from(`data: ${JSON.stringify({ id: 'chatcmpl-de060fd5333f000000000001', object: 'chat.completion.chunk', created: 1795781336,
  model: 'sim-chat', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`);
const chunks = [chunk({ role: 'assistant', content: '' }, null)];
for (let i = 0; i < 100; i++) chunks.push(chunk({ content: words[i % words.length] }, null));
chunks.push(Buffer.concat([chunk({}, 'length'), Buffer.from('data: [DONE]\n\n')]));

function round(streams) {
  for (let s = 0; s < streams; s++) {
    const m = new SseMeter({ stripUsageChunk: false, stripChunkUsage: false, model: RENAME ? 'sim-chat-stream' : 'sim-chat' });
    for (const c of chunks) m.onData(c);
    if (m.producedTokens() !== 100) throw new Error(`counted ${m.producedTokens()} tokens, not 100`);
  }
}
round(2000);
for (let r = 0; r < 5; r++) {
  const t = process.hrtime.bigint();
  round(5000);
  console.log(`${RENAME ? 'model named' : 'model kept'}: ${(Number(process.hrtime.bigint() - t) / (5000 * chunks.length)).toFixed(0)} ns per chunk`);
}

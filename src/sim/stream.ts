// Streaming (SSE) replies for chat and text completions: chunk framing, usage modes, token delays, aborts, stream faults.
import type http from 'node:http';
import type { Job } from './completions.js';
import { logprobEntries } from './generate.js';
import type { Faults } from './http.js';
import { jsonString } from './tokens.js';
import type { SimStats } from './index.js';

const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' };
const MALFORMED_EVENT = 'data: {not json\n\n';
const DONE = 'data: [DONE]\n\n';

/** The stream as whole SSE events; `token[i]` marks events that carry one generated token (delayed, counted). */
interface Frames { events: string[]; token: boolean[]; content: boolean[]; lastFinish: number }

function frames(job: Job, malformed: boolean): Frames {
  const chat = job.kind === 'chat';
  const head = `data: {"id":"${job.id}","object":"${chat ? 'chat.completion.chunk' : 'text_completion'}","created":${job.created},"model":${jsonString(job.modelId)},"choices":[`;
  const p = job.promptTokens;
  const staticTail = job.includeUsage ? '],"usage":null}\n\n' : ']}\n\n';
  let produced = 0;
  const tail = job.continuous
    ? () => `],"usage":{"prompt_tokens":${p},"completion_tokens":${produced},"total_tokens":${p + produced}}}\n\n`
    : () => staticTail;
  const f: Frames = { events: [], token: [], content: [], lastFinish: 0 };
  const push = (choice: string, token: boolean, content: boolean) => {
    f.events.push(head + choice + tail());
    f.token.push(token);
    f.content.push(content);
  };
  let malformedDone = !malformed;
  job.outputs.forEach((o, index) => {
    const open = `{"index":${index},`;
    if (chat) push(`${open}"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`, false, false);
    for (const r of o.reasoning) {
      produced++;
      push(`${open}"delta":{"reasoning_content":${jsonString(r)}},"logprobs":null,"finish_reason":null}`, true, false);
    }
    if (o.tool) {
      const t = o.tool;
      produced += t.nameTokens;
      push(`${open}"delta":{"tool_calls":[{"index":0,"id":"${t.id}","type":"function","function":{"name":${jsonString(t.name)},"arguments":""}}]},"logprobs":null,"finish_reason":null}`, false, false);
      for (const a of t.argPieces) {
        produced++;
        push(`${open}"delta":{"tool_calls":[{"index":0,"function":{"arguments":${jsonString(a)}}}]},"logprobs":null,"finish_reason":null}`, true, true);
      }
    }
    const lp = chat && job.topLogprobs !== null ? logprobEntries(o, job.topLogprobs) : null;
    o.pieces.forEach((piece, i) => {
      produced++;
      const logprobs = lp ? `{"content":[${JSON.stringify(lp[i])}],"refusal":null}` : 'null';
      push(chat
        ? `${open}"delta":{"content":${jsonString(piece)}},"logprobs":${logprobs},"finish_reason":null}`
        : `${open}"text":${jsonString(piece)},"logprobs":null,"finish_reason":null}`, true, true);
      if (!malformedDone) { f.events.push(MALFORMED_EVENT); f.token.push(false); f.content.push(false); malformedDone = true; }
    });
    if (!malformedDone && index === job.outputs.length - 1) { f.events.push(MALFORMED_EVENT); f.token.push(false); f.content.push(false); }
    f.lastFinish = f.events.length;
    push(chat
      ? `${open}"delta":{},"logprobs":null,"finish_reason":"${o.finish}"}`
      : `${open}"text":"","logprobs":null,"finish_reason":"${o.finish}"}`, false, false);
  });
  if (job.includeUsage) {
    f.events.push(`${head}],"usage":${JSON.stringify(job.usage)}}\n\n`);
    f.token.push(false);
    f.content.push(false);
  }
  f.events.push(DONE);
  f.token.push(false);
  f.content.push(false);
  return f;
}

/** Where a truncated stream dies: after the N-th content token, or before the last finish chunk if there are fewer. */
function cutIndex(f: Frames, after: number): number {
  let seen = 0;
  for (let i = 0; i < f.events.length; i++) {
    if (!f.content[i]) continue;
    if (seen === after) return i;
    seen++;
  }
  return f.lastFinish;
}

export function sendStream(job: Job, res: http.ServerResponse, faults: Faults, stats: SimStats): void {
  const f = frames(job, faults.malformed);
  const end = faults.truncateAfter === null ? f.events.length : cutIndex(f, faults.truncateAfter);
  const truncated = end < f.events.length;
  res.writeHead(200, SSE_HEADERS);
  stats.activeStreams++;
  let settled = false;
  let timer: NodeJS.Timeout | undefined;
  const settle = (outcome: 'completed' | 'aborted' | 'truncated') => {
    if (settled) return;
    settled = true;
    stats.activeStreams--;
    if (outcome === 'completed') stats.completedStreams++;
    else if (outcome === 'aborted') stats.abortedStreams++;
    if (timer !== undefined) { clearTimeout(timer); timer = undefined; }
  };
  res.on('close', () => settle(res.writableFinished ? 'completed' : 'aborted'));
  const finish = (rest: string) => {
    if (!truncated) { res.end(rest); return; }
    settle('truncated');
    res.write(rest || ':\n\n', () => res.destroy()); // no finish chunk, no usage, no [DONE]: the socket just dies
  };
  let i = 0;
  if (faults.delayMs <= 0) {
    let all = '';
    while (i < end) all += f.events[i++];
    finish(all);
    return;
  }
  // With a delay, every token event waits `delayMs`; the events between tokens go out with the token before them.
  const take = (): string => {
    let s = '';
    while (i < end && !f.token[i]) s += f.events[i++];
    return s;
  };
  const pump = (): void => {
    timer = undefined;
    if (settled) return;
    const s = f.events[i++]! + take();
    if (i >= end) { finish(s); return; }
    res.write(s);
    timer = setTimeout(pump, faults.delayMs);
  };
  const first = take();
  if (i >= end) { finish(first); return; }
  if (first) res.write(first);
  timer = setTimeout(pump, faults.delayMs);
}

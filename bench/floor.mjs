// The design's floor, a bench contender and nothing else: the gateway's own uWS front end (`Ctx`,
// `readBody`) and http-proxy-3 adapter (`Upstreams`) from dist/, forwarding every request to one
// upstream with nothing of the gateway in between — no auth, admission, metering or billing.
// What it costs over `direct` is what the chosen parts cost on this machine; what Tollgate costs over
// it is ours. `node bench/floor.mjs UPSTREAM_URL [STREAM_UPSTREAM_URL]`; prints {"base_url": ...}.
// With FLOOR_CLIENT=http the upstream call is Node's `http.request` on the same kind of keep-alive
// agent instead of http-proxy-3: what the card's proxy package costs, measured the other way.
import http from 'node:http';
import uWS from '@trufflesuite/uws-js-unofficial';
import { Ctx } from '../dist/server/context.js';
import { readBody } from '../dist/server/body.js';
import { Upstreams, FORWARDED } from '../dist/proxy/upstream.js';
import { collect } from '../dist/proxy/upstream.js';
import { boundHeapGrowth } from '../dist/server/heap.js';

const [target, streamTarget = target] = process.argv.slice(2);
if (!target) { console.error('usage: node bench/floor.mjs UPSTREAM_URL [STREAM_UPSTREAM_URL]'); process.exit(2); }
const upstream = (name, baseUrl) => [name, { name, baseUrl, sim: undefined, apiKeyEnv: undefined, timeoutMs: 600_000, continuousUsage: false, responsesApi: false, forwardHeaders: { names: [], prefixes: [] } }];
const upstreams = new Upstreams(new Map([upstream('chat', target), upstream('stream', streamTarget)]), new Map());
const PLAIN = process.env.FLOOR_CLIENT === 'http';
const agent = new http.Agent({ keepAlive: true, maxFreeSockets: 256, scheduling: 'lifo' });
const urls = { chat: new URL(target), stream: new URL(streamTarget) };

/** The same call as `Upstreams.call` (the same headers forwarded), on `http.request` directly. */
function plainCall(name, method, path, clientHeaders, body) {
  const headers = {};
  for (const k of FORWARDED) if (clientHeaders[k] !== undefined) headers[k] = clientHeaders[k];
  headers['content-length'] = String(body.length);
  let req;
  const response = new Promise((resolve, reject) => {
    req = http.request({ host: urls[name].hostname, port: urls[name].port, method, path, headers, agent }, resolve);
    req.on('error', reject);
    req.end(body);
  });
  response.catch(() => undefined);
  return { response, abort: () => req.destroy() };
}

// Requests for the stream model go to the stream upstream, as the gateway routes them by model.
const STREAM_MODEL = Buffer.from('"sim-chat-stream"');

async function forward(ctx, body) {
  const stream = body.includes(STREAM_MODEL);
  const args = [stream ? 'stream' : 'chat', ctx.method, ctx.url, ctx.headers, stream ? renamed(body) : body, ctx.requestId];
  const call = PLAIN ? plainCall(...args) : upstreams.call(...args);
  ctx.onAbort(() => call.abort());
  const res = await call.response;
  const type = res.headers['content-type'] ?? 'application/json';
  if (!type.startsWith('text/event-stream')) { ctx.send(res.statusCode, await collect(res), {}, type); return; }
  ctx.begin(res.statusCode, { 'content-type': type, 'cache-control': 'no-cache' });
  for await (const chunk of res) {
    const wait = ctx.write(chunk);
    if (wait) await wait;
    if (ctx.aborted) break;
  }
  ctx.end();
}

/** The one rewrite the gateway also makes for this model: its upstream name. */
function renamed(body) {
  return Buffer.from(body.toString().replace('"sim-chat-stream"', '"sim-chat"'));
}

// The same heap policy as `serve` (src/server/heap.ts), so memory under many streams compares like for like.
if (process.env.FLOOR_HEAP !== 'off') boundHeapGrowth();

const app = uWS.App();
app.any('/*', (res, req) => {
  const ctx = new Ctx(res, req);
  const body = ctx.method === 'GET' ? Promise.resolve(Buffer.alloc(0)) : readBody(ctx, 1 << 20);
  body.then((b) => forward(ctx, b)).catch(() => { if (!ctx.aborted) ctx.close(); });
});
app.listen('127.0.0.1', 0, (sock) => {
  if (!sock) { console.error('cannot listen'); process.exit(1); }
  console.log(JSON.stringify({ base_url: `http://127.0.0.1:${uWS.us_socket_local_port(sock)}` }));
});
process.on('SIGTERM', () => process.exit(0));

// Every route the gateway serves, mounted by family; the only routes without a key are the `public` ones.
import type { Services } from './services.js';
import type { Mount, Route } from './server/router.js';
import { alpha } from './families/alpha/family.js';
import { beta } from './families/beta/family.js';
import { svc } from './families/svc/family.js';
import { chatRoutes } from './families/alpha/chat.js';
import { modelRoutes } from './families/alpha/models.js';
import { completionRoutes } from './families/alpha/completions.js';
import { responsesRoutes } from './families/alpha/responses.js';
import { audioRoutes } from './families/alpha/audio.js';
import { transcriptRoutes } from './families/alpha/transcripts.js';
import { fileRoutes } from './families/alpha/files.js';
import { batchRoutes } from './families/alpha/batches.js';
import { voiceRoutes } from './families/beta/voices.js';
import { ttsRoutes } from './families/beta/tts.js';
import { sttRoutes } from './families/beta/stt.js';
import { stsRoutes } from './families/beta/sts.js';
import { betaPreset } from './families/beta/presets.js';
import { measureAudio } from './meter/audio.js';
import { accountRoutes as betaAccountRoutes } from './families/beta/account.js';
import { keyRoutes } from './families/svc/key.js';
import { billingRoutes } from './families/svc/billing.js';
import { receiptRoutes } from './families/svc/receipts.js';
import { consoleRoutes } from './console/routes.js';
import { streamInputRoute } from './families/beta/stream-input.js';
import { multiStreamInputRoute } from './families/beta/multi-stream-input.js';
import { realtimeRoute } from './families/alpha/realtime/route.js';
import { RealtimeSecrets, realtimeSecretRoutes } from './families/alpha/realtime/secrets.js';
import { notOfferedRoutes } from './families/not-offered.js';
import { statusPage } from './console/pages/status.js';
import { ALPHA_NOT_OFFERED } from './families/alpha/not-offered.js';
import { BETA_NOT_OFFERED } from './families/beta/not-offered.js';

export function mounts(s: Services): Mount[] {
  const secrets = new RealtimeSecrets(s);
  const ops: Route[] = [
    { method: 'GET', path: '/health', name: 'health', scope: 'public', handler: async (ctx) => ctx.json(200, { status: 'ok' }) },
    { method: 'GET', path: '/metrics', name: 'metrics', scope: 'public',
      handler: async (ctx) => ctx.send(200, s.metrics.render(), {}, 'text/plain; version=0.0.4') },
    // For load balancers: health in application/health+json (fail: 503), and readiness (503 while a store is down or draining).
    { method: 'GET', path: '/healthz', name: 'healthz', scope: 'public', handler: async (ctx) => {
      const h = s.statusBoard.health();
      ctx.send(h.status === 'fail' ? 503 : 200, JSON.stringify(h.body), { 'cache-control': 'no-store' }, 'application/health+json');
    } },
    { method: 'GET', path: '/readyz', name: 'readyz', scope: 'public', handler: async (ctx) => {
      const r = s.health.ready();
      ctx.json(r.ready ? 200 : 503, r.ready ? { status: 'ready' } : { status: 'not_ready', reason: r.reason }, { 'cache-control': 'no-store', ...(r.ready ? {} : { 'retry-after': '2' }) });
    } },
    { method: 'GET', path: '/status', name: 'status.page', scope: 'public', handler: async (ctx) => statusPage(s, ctx) },
  ];
  const status: Route = { method: 'GET', path: '/v1/status', name: 'svc.status', scope: 'public', handler: async (ctx) => {
    const host = ctx.headers.host;
    const url = s.config.publicUrl ? `${s.config.publicUrl}/status` : host && /^[A-Za-z0-9.:[\]-]+$/.test(host) ? `http://${host}/status` : '/status';
    ctx.json(200, s.statusBoard.summary(url), { 'cache-control': 'no-store', 'access-control-allow-origin': '*' });
  } };
  const measure = async (data: Buffer, param: string): Promise<number> => (await measureAudio(data, { param, ffmpeg: s.ffmpeg })).durationMs;
  return [
    { family: alpha, routes: [...chatRoutes(s), ...completionRoutes(s), ...responsesRoutes(s), ...modelRoutes(s), ...audioRoutes(s), ...transcriptRoutes(s), ...fileRoutes(s), ...batchRoutes(s),
      ...realtimeSecretRoutes(s, secrets), ...notOfferedRoutes('alpha', ALPHA_NOT_OFFERED)], sockets: [realtimeRoute(s, (presented) => secrets.grant(presented))] },
    { family: beta, routes: [...voiceRoutes(s), ...ttsRoutes(s, betaPreset), ...sttRoutes(s, measure), ...stsRoutes(s, measure, betaPreset), ...betaAccountRoutes(s), ...notOfferedRoutes('beta', BETA_NOT_OFFERED)], sockets: [streamInputRoute(s), multiStreamInputRoute(s)] },
    { family: svc, routes: [...keyRoutes(s), ...billingRoutes(s), ...receiptRoutes(s), status] },
    // The console renders its own errors as pages; health and metrics need no envelope of a family.
    { family: svc, routes: [...ops, ...consoleRoutes(s)], prefixes: [''] },
  ];
}

/** The envelope of an error on a path no family claims. */
export const fallbackFamily = alpha;

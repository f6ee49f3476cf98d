// Batches under /alpha/v1: create (balance and ceiling checked), list, retrieve, cancel; and the endpoints a batch line may call.
import { Type } from '@sinclair/typebox';
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import { GatewayError, invalidValue } from '../../errors.js';
import { admit } from '../../gate/admission.js';
import { base62 } from '../../store/ids.js';
import { getFile } from '../../store/files.js';
import { batchObject, cancelBatch, createBatch, getBatch, listBatches } from '../../store/batches.js';
import type { BatchEndpoints } from '../../exchange/client.js';
import { checkMetadata, compile, parseJson } from '../validate.js';
import { alpha } from './family.js';
import { chatCompletion } from './chat.js';
import { completion, embedding } from './completions.js';
import { response } from './responses.js';
import { intParam, noSuch, EXPIRES_MAX_SECS, EXPIRES_MIN_SECS } from './files.js';
import { streamList } from './list-reply.js';

const ENDPOINTS = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/responses'] as const;
const WINDOW_MS = 24 * 3600 * 1000;

const CreateBatch = Type.Object({
  input_file_id: Type.String({ minLength: 1 }),
  endpoint: Type.Union(ENDPOINTS.map((e) => Type.Literal(e))),
  completion_window: Type.Literal('24h'),
  // Checked by checkMetadata (a schema's Record cannot bound its keys' length).
  metadata: Type.Optional(Type.Unknown()),
  // Kept with the batch's other properties and applied by the worker to the output and error files.
  output_expires_after: Type.Optional(Type.Object({
    anchor: Type.Literal('created_at'), seconds: Type.Integer({ minimum: EXPIRES_MIN_SECS, maximum: EXPIRES_MAX_SECS }),
  }, { additionalProperties: false })),
}, { additionalProperties: true });
/** Request fields kept and returned as given (none the gateway uses): bounded, since every list reply carries them. */
const MAX_EXTRA_BYTES = 4096;
const check = compile(CreateBatch);

/**
 * What each batch endpoint runs: the live route's own function (same validation, refused parameters, upstream and meter).
 * `cli.ts` hands this to `openServices`, so the services (and the batch worker) never import a family.
 */
export function batchEndpoints(s: Services): BatchEndpoints {
  return {
    runners: new Map([
      ['/v1/chat/completions', { run: (c, b) => chatCompletion(s, c, b), name: 'chat.completions' }],
      ['/v1/completions', { run: (c, b) => completion(s, c, b), name: 'completions' }],
      ['/v1/embeddings', { run: (c, b) => embedding(s, c, b), name: 'embeddings' }],
      ['/v1/responses', { run: (c, b) => response(s, c, b), name: 'responses' }],
    ]),
    render: (err, requestId) => alpha.render(err, requestId),
  };
}

export function batchRoutes(s: Services): Route[] {
  return [
    {
      method: 'POST', path: '/v1/batches', name: 'batches.create', scope: 'batch', metered: true,
      handler: async (ctx, { body }) => {
        const req = parseJson(check, body, ctx.headers['content-type']);
        checkMetadata(req.metadata);
        const { input_file_id, endpoint, completion_window, metadata, ...extra } = req;
        const extraBytes = Buffer.byteLength(JSON.stringify(extra));
        if (extraBytes > MAX_EXTRA_BYTES) {
          const field = Object.keys(extra)[0] ?? 'body';
          throw new GatewayError({ code: 'invalid_value', param: field.slice(0, 64),
            message: `Fields other than input_file_id, endpoint, completion_window and metadata are kept as given up to ${MAX_EXTRA_BYTES} bytes together; these take ${extraBytes}.` });
        }
        const key = ctx.key!;
        // Balance > 0 and the key under its ceiling (402 otherwise), with rpm and concurrency; nothing is held:
        // each line reserves its own worst case when it runs.
        const hold = await admit(s.admission, key, `batches.create/${ctx.requestId}/${base62(8)}`, 0n);
        await hold.release();
        const file = await getFile(s.db, key.accountId, req.input_file_id);
        if (!file) throw noSuch('file', req.input_file_id, 'input_file_id');
        if (file.purpose !== 'batch') {
          throw invalidValue('input_file_id', `File ${file.id} has purpose "${file.purpose}"; a batch reads a file uploaded with purpose "batch".`);
        }
        const b = await createBatch(s.db, {
          accountId: key.accountId, keyId: key.id, endpoint, inputFileId: input_file_id, completionWindow: completion_window,
          windowMs: WINDOW_MS, metadata, extra: extra as Record<string, unknown>,
        });
        ctx.json(200, batchObject(b));
      },
    },
    {
      method: 'GET', path: '/v1/batches', name: 'batches.list', scope: 'batch',
      handler: async (ctx) => {
        const q = new URLSearchParams(ctx.query);
        const limit = intParam(q, 'limit', 20, 1, 100);
        await streamList(ctx, limit, q.get('after') ?? undefined, {
          rows: (after, n) => listBatches(s.db, ctx.key!.accountId, { limit: n, after }),
          id: (b) => b.id, render: batchObject,
          tail: (first, last, more) => ({ has_more: more, ...(first !== null ? { first_id: first, last_id: last } : {}) }),
        });
      },
    },
    {
      method: 'GET', path: '/v1/batches/:batch_id', name: 'batches.retrieve', scope: 'batch',
      handler: async (ctx, { params }) => {
        const b = await getBatch(s.db, ctx.key!.accountId, params.batch_id!);
        if (!b) throw noSuch('batch', params.batch_id!);
        ctx.json(200, batchObject(b));
      },
    },
    {
      method: 'POST', path: '/v1/batches/:batch_id/cancel', name: 'batches.cancel', scope: 'batch',
      handler: async (ctx, { params }) => {
        const b = await cancelBatch(s.db, ctx.key!.accountId, params.batch_id!);
        if (!b) throw noSuch('batch', params.batch_id!);
        if (b.status !== 'cancelling' && b.status !== 'cancelled') {
          throw new GatewayError({ code: 'batch_not_cancellable', message: `Batch ${b.id} is ${b.status}; only a validating or in-progress batch can be cancelled.` });
        }
        ctx.json(200, batchObject(b));
      },
    },
  ];
}

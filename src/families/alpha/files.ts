// Files under /alpha/v1: upload (multipart, streamed into the store), list, retrieve, content (streamed out), delete.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { Readable } from 'node:stream';
import type { Ctx } from '../../server/context.js';
import { GatewayError, invalidValue, missingParameter } from '../../errors.js';
import { uploadQuota } from '../storage.js';
import { readMultipart, invalidMultipart, type Multipart } from '../../server/multipart.js';
import { requireFunds } from '../../gate/admission.js';
import { streamList } from './list-reply.js';
import { deleteFile, dropFile, publishFile, fileChunks, fileObject, getFile, listFiles, newFileId, storeFile, type FileRow } from '../../store/files.js';

/** What CreateFileRequest's `purpose` may be. */
const PURPOSES = ['assistants', 'batch', 'fine-tune', 'vision', 'user_data', 'evals'];

/** `expires_after.seconds` bounds (FileExpirationAfter, BatchFileExpirationAfter in OpenAI's spec): 1 hour to 30 days. */
export const EXPIRES_MIN_SECS = 3600;
export const EXPIRES_MAX_SECS = 2_592_000;

/** The multipart `expires_after[anchor]` and `expires_after[seconds]` (how the official clients send it): seconds, or null when absent. */
function expiresAfter(form: Multipart, field = 'expires_after'): number | null {
  const anchor = form.field(`${field}[anchor]`);
  const seconds = form.field(`${field}[seconds]`);
  if (anchor === undefined && seconds === undefined) {
    if (form.field(field) !== undefined) throw invalidValue(field, `\`${field}\` is an object: send \`${field}[anchor]\` and \`${field}[seconds]\` as form fields.`);
    return null;
  }
  if (anchor === undefined) throw new GatewayError({ code: 'missing_required_parameter', param: `${field}.anchor`, message: `\`${field}.anchor\` is required ("created_at").` });
  if (anchor !== 'created_at') throw new GatewayError({ code: 'invalid_value', param: `${field}.anchor`, message: `\`${field}.anchor\` must be "created_at"; got ${JSON.stringify(anchor.slice(0, 32))}.` });
  if (seconds === undefined) throw new GatewayError({ code: 'missing_required_parameter', param: `${field}.seconds`, message: `\`${field}.seconds\` is required.` });
  const n = Number(seconds);
  if (!/^\d+$/.test(seconds) || n < EXPIRES_MIN_SECS || n > EXPIRES_MAX_SECS) {
    throw new GatewayError({ code: 'invalid_value', param: `${field}.seconds`,
      message: `\`${field}.seconds\` must be a whole number from ${EXPIRES_MIN_SECS} (1 hour) to ${EXPIRES_MAX_SECS} (30 days); got ${JSON.stringify(seconds.slice(0, 32))}.` });
  }
  return n;
}

export function noSuch(what: 'file' | 'batch', id: string, param: string | null = null): GatewayError {
  return new GatewayError({ code: 'not_found', param, message: `No ${what} with id '${id.slice(0, 128)}' found.` });
}

/** A query's integer in [min, max], or its default; anything else is 400 naming the parameter. */
export function intParam(q: URLSearchParams, name: string, def: number, min: number, max: number): number {
  const v = q.get(name);
  if (v === null || v === '') return def;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw invalidValue(name, `\`${name}\` must be a whole number from ${min} to ${max}; got ${JSON.stringify(v.slice(0, 32))}.`);
  }
  return n;
}

export function fileRoutes(s: Services): Route[] {
  return [
    {
      method: 'POST', path: '/v1/files', name: 'files.create', scope: 'batch', body: 'stream',
      // The multipart envelope around a file at the limit: the file's own limit is checked exactly.
      bodyLimit: s.config.batches.maxFileBytes + 64 * 1024,
      handler: (ctx, { stream }) => upload(s, ctx, stream!),
    },
    {
      method: 'GET', path: '/v1/files', name: 'files.list', scope: 'batch',
      handler: async (ctx) => {
        const q = new URLSearchParams(ctx.query);
        const order = q.get('order') ?? 'desc';
        if (order !== 'asc' && order !== 'desc') throw invalidValue('order', '`order` must be "asc" or "desc".');
        const limit = intParam(q, 'limit', 10_000, 1, 10_000);
        const purpose = q.get('purpose') ?? undefined;
        await streamList(ctx, limit, q.get('after') ?? undefined, {
          rows: (after, n) => listFiles(s.db, ctx.key!.accountId, { purpose, limit: n, after, order }),
          page: 200, id: (f) => f.id, render: fileObject,
          tail: (first, last, more) => ({ first_id: first, last_id: last, has_more: more }),
        });
      },
    },
    {
      method: 'GET', path: '/v1/files/:file_id', name: 'files.retrieve', scope: 'batch',
      handler: async (ctx, { params }) => ctx.json(200, fileObject(await owned(s, ctx, params.file_id!))),
    },
    {
      method: 'DELETE', path: '/v1/files/:file_id', name: 'files.delete', scope: 'batch',
      handler: async (ctx, { params }) => {
        if (!(await deleteFile(s.db, ctx.key!.accountId, params.file_id!))) throw noSuch('file', params.file_id!);
        ctx.json(200, { id: params.file_id, object: 'file', deleted: true });
      },
    },
    {
      method: 'GET', path: '/v1/files/:file_id/content', name: 'files.content', scope: 'batch',
      handler: async (ctx, { params }) => {
        const f = await owned(s, ctx, params.file_id!);
        // Streamed a stored chunk at a time, each written when the client has taken the one before.
        ctx.begin(200, { 'content-type': f.filename.endsWith('.jsonl') ? 'application/jsonl' : 'application/octet-stream', 'x-file-bytes': String(f.bytes) });
        for await (const chunk of fileChunks(s.db, f.id)) {
          if (!ctx.live) return;
          const wait = ctx.write(chunk);
          if (wait) await wait;
        }
        ctx.end();
      },
    },
  ];
}

async function owned(s: Services, ctx: Ctx, id: string): Promise<FileRow> {
  const f = await getFile(s.db, ctx.key!.accountId, id);
  if (!f) throw noSuch('file', id);
  return f;
}

/** A file name is stored and listed as given: bounded (bytes, as a file system bounds one) and without NUL. */
const MAX_FILENAME_BYTES = 255;

function checkFilename(name: string): void {
  const bytes = Buffer.byteLength(name);
  if (bytes > MAX_FILENAME_BYTES || name.includes('\u0000')) {
    throw new GatewayError({ code: 'invalid_value', param: 'file',
      message: bytes > MAX_FILENAME_BYTES ? `The file name is ${bytes} bytes; at most ${MAX_FILENAME_BYTES} are allowed.` : 'The file name contains a NUL character.' });
  }
}

/**
 * The file part is stored as it arrives (a chunk at a time, never whole in memory); past the limit
 * it is 413 and what was stored is deleted. `purpose` may come before or after the file: a file
 * stored before a bad purpose is read is deleted too.
 */
async function upload(s: Services, ctx: Ctx, stream: Readable): Promise<void> {
  const accountId = ctx.key!.accountId;
  let stored: FileRow | null = null;
  let files = 0;
  // The upload's row, and the store writing it: a failed request waits for it to finish (and undo
  // itself) and drops the row before it answers, so a 413 leaves nothing behind, not even `uploading`.
  const id = newFileId();
  let storing: Promise<unknown> = Promise.resolve();
  // A body declared past the route's limit is refused before the handler runs: its stream is failed
  // already, and readMultipart would wait on it for ever.
  if (stream.errored) throw stream.errored;
  // An account that cannot pay stores nothing, and no account stores past its quota.
  await requireFunds(s.admission, ctx.key!);
  // The declared body less a generous multipart envelope (boundaries, `purpose`, `expires_after`) is the least the file holds.
  const quota = await uploadQuota(s, accountId, Math.max(0, (Number(ctx.headers['content-length'] ?? 0) || 0) - 4096), 'file');
  try {
    const form = await readMultipart(stream, ctx.headers['content-type'], {
      maxFileBytes: s.config.batches.maxFileBytes, maxFiles: 1,
      onFile: async (f) => {
        if (f.field !== 'file') { f.stream.resume(); throw invalidMultipart(`Unexpected file field "${f.field.slice(0, 64)}": send the file as "file".`); }
        files++;
        try { checkFilename(f.filename); } catch (e) { f.stream.resume(); throw e; }
        const p = storeFile(s.db, { id, accountId, purpose: 'batch', filename: f.filename || 'file', unlisted: true, quota }, f.stream);
        storing = p.catch(() => undefined);
        stored = await p;
      },
    });
    const purpose = form.field('purpose');
    if (!purpose) throw missingParameter('purpose', '`purpose` is required (for a batch input: "batch").');
    if (!PURPOSES.includes(purpose)) {
      throw invalidValue('purpose', `\`purpose\` must be one of ${PURPOSES.join(', ')}; got ${JSON.stringify(purpose.slice(0, 64))}.`);
    }
    const file = stored as FileRow | null;
    if (files === 0 || !file) throw missingParameter('file', '`file` is required: send the file as the multipart field "file".');
    // As OpenAI: a batch file expires after 30 days unless told otherwise; other files are kept until deleted.
    const expires = expiresAfter(form) ?? (purpose === 'batch' ? EXPIRES_MAX_SECS : null);
    ctx.json(200, fileObject(await publishFile(s.db, file.id, purpose, expires)));
  } catch (e) {
    await storing;
    if (files > 0) await dropFile(s.db, id).catch(() => undefined);
    throw e;
  }
}

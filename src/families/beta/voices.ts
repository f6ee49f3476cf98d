// Voices: cloning from samples (the cloning contract), listing, reading, deleting voices and samples, sample audio. Every read is the caller's account's.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { Ctx } from '../../server/context.js';
import { GatewayError } from '../../errors.js';
import type { Readable } from 'node:stream';
import { createHash } from 'node:crypto';
import { readMultipart } from '../../server/multipart.js';
import { requireFunds } from '../../gate/admission.js';
import { dropFile, fileChunks, newFileId, storeFile } from '../../store/files.js';
import { uploadQuota } from '../storage.js';
import { log } from '../../observe/log.js';
import { cloneOnPool, removeCopies } from '../../proxy/voices.js';
import { deleteSample, deleteVoice, insertVoice, sampleAudio, voiceCounts, voiceOf, voicesOf, type VoiceRecord } from '../../store/voices.js';
import { clonedVoiceView } from './views.js';
import { beta } from './family.js';
import { presetViews } from './presets.js';
import { measureAudio } from '../../meter/audio.js';
import { routeUploadBytes } from '../../config.js';
import { refuseNoiseRemoval, refuseSearchFilters, refuseWithSettings } from './voice-params.js';

function voiceNotFound(id: string): GatewayError {
  return new GatewayError({ code: 'voice_not_found', type: 'not_found', param: 'voice_id', message: `A voice with voice_id '${id}' was not found.` });
}

function sampleNotFound(voiceId: string, sampleId: string): GatewayError {
  return new GatewayError({ code: 'sample_not_found', param: 'sample_id',
    message: `A sample with sample_id '${sampleId}' was not found for voice_id '${voiceId}'.` });
}

function invalid(field: string, code: 'validation_error' | 'invalid_labels', msg: string): GatewayError {
  return new GatewayError({ status: 422, code, param: field, message: msg, detail: [{ loc: ['body', field], msg, type: code === 'invalid_labels' ? 'value_error.invalid_labels' : 'value_error' }] });
}

/** `labels`: a JSON object of strings, sent as a string. */
function parseLabels(text: string | undefined): Record<string, string> {
  // The Python client sends `null` when no labels were given.
  if (text === undefined || text.trim() === '' || text.trim() === 'null') return {};
  let v: unknown;
  try { v = JSON.parse(text); } catch {
    throw invalid('labels', 'invalid_labels', 'labels must be a JSON object of strings, sent as a string; this is not valid JSON.');
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw invalid('labels', 'invalid_labels', 'labels must be a JSON object of strings.');
  for (const [k, x] of Object.entries(v)) {
    if (typeof x !== 'string') throw invalid('labels', 'invalid_labels', `labels must be a JSON object of strings; "${k.slice(0, 64)}" is not a string.`);
  }
  return v as Record<string, string>;
}

/** A sample stored as it arrived (a file of the account, unlisted), with its md5 taken on the way. */
interface StoredSample { fileId: string; fileName: string; mimeType: string; sizeBytes: number; hash: string }

/**
 * Each sample's duration, its bytes read back from the store one sample at a time into one buffer the
 * size of the largest sample (what a request holds in memory at most, besides a stored chunk).
 */
async function sampleDurations(s: Services, samples: readonly StoredSample[]): Promise<number[]> {
  const buf = Buffer.allocUnsafe(Math.max(...samples.map((f) => f.sizeBytes)));
  const out: number[] = [];
  for (const f of samples) {
    let at = 0;
    for await (const c of fileChunks(s.db, f.fileId)) at += c.copy(buf, at);
    out.push((await measureAudio(buf.subarray(0, at), { param: 'files', ffmpeg: s.ffmpeg, use: 'voice_sample' })).durationMs / 1000);
  }
  return out;
}

/**
 * Samples go to the store as they arrive (chunk by chunk, counted against the account's storage
 * quota), never gathered in memory; the request's whole body is bounded by voices.max_request_bytes.
 * Any refusal after that deletes what was stored.
 */
async function addVoice(s: Services, ctx: Ctx, stream: Readable): Promise<void> {
  const key = ctx.key!;
  if (stream.errored) throw stream.errored;
  const { maxSamples, maxPerAccount } = s.config.voices;
  // Refused before a byte of the samples is read: an account at its voice limit, one that cannot pay, one at its storage quota.
  if ((await voiceCounts(s.db, key.accountId, new Date(0))).held >= maxPerAccount) throw voiceLimit(maxPerAccount);
  await requireFunds(s.admission, key);
  // The declared body less its multipart envelope (boundaries and fields, generously) is the least the samples hold.
  const quota = await uploadQuota(s, key.accountId, Math.max(0, (Number(ctx.headers['content-length'] ?? 0) || 0) - 16 * 1024), 'files');
  const stored: StoredSample[] = [];
  try {
    // Each sample up to the route's upload limit (413 past it), at most voices.max_samples of them.
    const form = await readMultipart(stream, ctx.headers['content-type'], { maxFileBytes: routeUploadBytes(s.config, 'beta.voices.add'), maxFiles: maxSamples,
      tooManyFiles: invalid('files', 'validation_error', `A voice takes at most ${maxSamples} samples.`),
      onFile: async (f) => {
        if (f.field !== 'files') { f.stream.resume(); return; }
        const md5 = createHash('md5');
        async function* hashed(): AsyncGenerator<Buffer> { for await (const c of f.stream) { md5.update(c as Buffer); yield c as Buffer; } }
        const entry = { fileId: newFileId(), fileName: f.filename, mimeType: f.mimeType, sizeBytes: 0, hash: '' };
        stored.push(entry);
        const row = await storeFile(s.db, { id: entry.fileId, accountId: key.accountId, purpose: 'voice_sample', filename: f.filename || 'sample', unlisted: true, quota }, hashed());
        entry.sizeBytes = row.bytes;
        entry.hash = md5.digest('hex');
      } });
    const name = form.field('name')?.trim();
    if (!name) throw invalid('name', 'validation_error', 'name is required: the name of the new voice.');
    if (name.length > 200) throw invalid('name', 'validation_error', 'name must be at most 200 characters.');
    if (stored.length === 0) throw invalid('files', 'validation_error', 'files is required: one or more audio samples of the voice.');
    if (stored.some((f) => f.sizeBytes === 0)) throw invalid('files', 'validation_error', 'a sample in files is empty.');
    const labels = parseLabels(form.field('labels'));
    refuseNoiseRemoval(form.field('remove_background_noise'));
    const description = form.field('description') ?? null;
    const model = s.models.models.find((m) => m.voiceCloning);
    if (!model) {
      throw new GatewayError({ code: 'voice_cloning_unavailable', message: 'This gateway has no model that clones voices (no tts model with voice_cloning).' });
    }
    // Each sample must be audio whose length can be read (400 invalid_audio otherwise, nothing stored): its duration is listed.
    const durations = await sampleDurations(s, stored);
    // Cloned on every upstream of the model's pool, all or nothing (a failure removes the copies made; nothing is stored).
    const copies = await cloneOnPool(s.upstreams, model.pool, { name, requestId: ctx.requestId, clientHeaders: ctx.headers,
      samples: stored.map((f) => ({ fileName: f.fileName, mimeType: f.mimeType, size: f.sizeBytes, read: () => fileChunks(s.db, f.fileId) })) },
    (res) => beta.upstreamError(res, ctx.requestId));
    let id: string | null;
    try {
      id = await insertVoice(s.db, { accountId: key.accountId, name, description, labels, modelId: model.id, copies,
        samples: stored.map((f, i) => ({ ...f, durationSecs: durations[i]! })) }, maxPerAccount);
    } catch (e) {
      id = null;
      log('error', 'voice not stored', { request_id: ctx.requestId, error: (e as Error).message });
      // Nothing is kept anywhere when the voice cannot be stored: the upstreams' copies go too.
      await removeCopies(s.upstreams, copies, ctx.requestId);
      throw e;
    }
    if (id === null) {
      // Another add of this account took the last slot meanwhile (the count and the insert are one step).
      await removeCopies(s.upstreams, copies, ctx.requestId);
      throw voiceLimit(maxPerAccount);
    }
    ctx.json(200, { voice_id: id, requires_verification: false });
  } catch (e) {
    for (const f of stored) await dropFile(s.db, f.fileId).catch(() => undefined);
    throw e;
  }
}

function voiceLimit(max: number): GatewayError {
  return new GatewayError({ code: 'voice_limit_reached', message: `This account holds ${max} voices, its limit; delete one to add another.` });
}

async function ownVoice(s: Services, ctx: Ctx, id: string): Promise<VoiceRecord> {
  const v = await voiceOf(s.db, ctx.key!.accountId, id);
  if (!v) throw voiceNotFound(id);
  return v;
}

type View = Record<string, unknown>;

/** `GET /v2/voices`: `search` (name or description), `category`/`voice_type`, `sort` (`created_at_unix` or `name`), `sort_direction`, `page_size` (1–100, default 10), `next_page_token`. */
export function searchVoices(all: View[], q: URLSearchParams): View {
  const size = q.get('page_size') === null ? 10 : Number(q.get('page_size'));
  if (!Number.isInteger(size) || size < 1 || size > 100) {
    throw new GatewayError({ code: 'validation_error', param: 'page_size', message: 'page_size must be an integer from 1 to 100.',
      detail: [{ loc: ['query', 'page_size'], msg: 'page_size must be an integer from 1 to 100.', type: 'value_error' }] });
  }
  const token = q.get('next_page_token');
  const from = token === null || token === '' ? 0 : Number(token);
  if (!Number.isInteger(from) || from < 0) {
    throw new GatewayError({ code: 'validation_error', param: 'next_page_token', message: 'next_page_token is not one this API gave out.',
      detail: [{ loc: ['query', 'next_page_token'], msg: 'next_page_token is not one this API gave out.', type: 'value_error' }] });
  }
  const text = q.get('search')?.toLowerCase() ?? '';
  const category = q.get('category');
  const type = q.get('voice_type');
  const hits = all.filter((v) => (!text || `${v.name as string} ${(v.description as string | null) ?? ''}`.toLowerCase().includes(text))
    && (!category || v.category === category)
    && (!type || (type === 'personal' ? v.category !== 'premade' : type === 'default' ? v.category === 'premade' : true)));
  // The family's default: newest first by created_at_unix (premade voices have none, so they come last); or by name.
  const desc = (q.get('sort_direction') ?? 'desc') !== 'asc';
  const byName = q.get('sort') === 'name';
  const key = (v: View): number | string => (byName ? String(v.name).toLowerCase() : (v.created_at_unix as number | null) ?? -1);
  const ordered = hits.map((v, i) => ({ v, i })).sort((a, b) => {
    const x = key(a.v);
    const y = key(b.v);
    // premade voices (no date) keep their listed order, the clients' example voices first (presets.ts)
    if (x === y) return desc && !byName && x !== -1 ? b.i - a.i : a.i - b.i;
    return (x < y ? -1 : 1) * (desc ? -1 : 1);
  }).map((e) => e.v);
  const page = ordered.slice(from, from + size);
  const more = from + size < hits.length;
  return { voices: page, has_more: more, total_count: hits.length, next_page_token: more ? String(from + size) : null };
}

export function voiceRoutes(s: Services): Route[] {
  const presetModels = s.models.models.filter((m) => m.kind === 'tts' && !m.voiceCloning).map((m) => m.id);
  /** Premade voices first (everyone's), then the caller's cloned voices. */
  const all = async (ctx: Ctx, legacy: boolean): Promise<View[]> =>
    [...presetViews(legacy, presetModels), ...(await voicesOf(s.db, ctx.key!.accountId)).map(clonedVoiceView)];
  return [
    { method: 'POST', path: '/v1/voices/add', name: 'beta.voices.add', scope: 'voice', body: 'stream',
      // The whole request, samples and fields together: past it 413, refused on its declared length before any of it is read.
      bodyLimit: s.config.voices.maxRequestBytes,
      handler: async (ctx, { stream }) => addVoice(s, ctx, stream!) },
    { method: 'GET', path: '/v1/voices', name: 'beta.voices.list', scope: 'voice',
      handler: async (ctx) => ctx.json(200, { voices: await all(ctx, new URLSearchParams(ctx.query).get('show_legacy') === 'true') }) },
    { method: 'GET', path: '/v2/voices', name: 'beta.voices.search', scope: 'voice',
      handler: async (ctx) => {
        const q = new URLSearchParams(ctx.query);
        refuseSearchFilters(q);
        ctx.json(200, searchVoices(await all(ctx, true), q));
      } },
    { method: 'GET', path: '/v1/voices/:voice_id', name: 'beta.voices.get', scope: 'voice',
      handler: async (ctx, { params }) => {
        refuseWithSettings(new URLSearchParams(ctx.query));
        const preset = presetViews(true, presetModels).find((v) => v.voice_id === params.voice_id);
        ctx.json(200, preset ?? clonedVoiceView(await ownVoice(s, ctx, params.voice_id!)));
      } },
    { method: 'DELETE', path: '/v1/voices/:voice_id', name: 'beta.voices.delete', scope: 'voice',
      handler: async (ctx, { params }) => {
        const v = await ownVoice(s, ctx, params.voice_id!);
        if (!(await deleteVoice(s.db, ctx.key!.accountId, v.id))) throw voiceNotFound(v.id);
        await removeCopies(s.upstreams, v.copies, ctx.requestId);
        ctx.json(200, { status: 'ok' });
      } },
    { method: 'DELETE', path: '/v1/voices/:voice_id/samples/:sample_id', name: 'beta.voices.samples.delete', scope: 'voice',
      handler: async (ctx, { params }) => {
        await ownVoice(s, ctx, params.voice_id!);
        if (!(await deleteSample(s.db, ctx.key!.accountId, params.voice_id!, params.sample_id!))) throw sampleNotFound(params.voice_id!, params.sample_id!);
        ctx.json(200, { status: 'ok' });
      } },
    { method: 'GET', path: '/v1/voices/:voice_id/samples/:sample_id/audio', name: 'beta.voices.samples.audio', scope: 'voice',
      handler: async (ctx, { params }) => {
        await ownVoice(s, ctx, params.voice_id!);
        const a = await sampleAudio(s.db, ctx.key!.accountId, params.voice_id!, params.sample_id!);
        if (!a) throw sampleNotFound(params.voice_id!, params.sample_id!);
        // Streamed a stored chunk at a time, as file content is.
        ctx.begin(200, { 'content-type': a.mimeType || 'application/octet-stream' });
        for await (const chunk of fileChunks(s.db, a.fileId)) {
          if (!ctx.live) return;
          const wait = ctx.write(chunk);
          if (wait) await wait;
        }
        ctx.end();
      } },
  ];
}

// The voice-cloning contract (docs/upstreams.md): samples in, the upstream's voice id out; and removal.
import type { Upstreams } from './upstream.js';
import { collect, upstreamMalformed } from './upstream.js';
import { streamForm, type StreamedPart } from './form.js';
import type { GatewayError } from '../errors.js';
import type { PoolEntry } from '../config.js';
import type { VoiceCopy } from '../store/voices.js';

export interface CloneRequest {
  upstream: string;
  /** The clone TTS model's name at the upstream. */
  model: string;
  name: string;
  /** Each sample's bytes are read as the upstream takes them (never all in memory). */
  samples: { fileName: string; mimeType: string; size: number; read: () => AsyncIterable<Buffer> }[];
  requestId: string;
  /** The client's headers: only what the upstream's forward_headers allow is passed on. */
  clientHeaders: Record<string, string>;
}

/**
 * `POST /v1/audio/voices` (multipart: `name`, `model`, repeated `files`) → `{"voice_id": "..."}`.
 * An error reply is read by `upstreamError` (the family's reading of an upstream error).
 */
export async function cloneVoice(ups: Upstreams, r: CloneRequest, upstreamError: (res: import('node:http').IncomingMessage) => Promise<GatewayError>): Promise<string> {
  // ElevenLabs itself: `POST /v1/voices/add` (multipart `name`, repeated `files`) answers `{"voice_id", "requires_verification"}`.
  const native = ups.config(r.upstream).protocol === 'elevenlabs';
  const parts: ({ name: string; value: string } | StreamedPart)[] = [{ name: 'name', value: r.name }];
  if (!native) parts.push({ name: 'model', value: r.model });
  for (const s of r.samples) parts.push({ name: 'files', filename: s.fileName || 'sample', contentType: s.mimeType || 'application/octet-stream', size: s.size, read: s.read });
  const form = streamForm(parts);
  const call = ups.call(r.upstream, 'POST', native ? '/v1/voices/add' : '/v1/audio/voices', { ...r.clientHeaders, 'content-type': form.contentType, accept: 'application/json' }, form, r.requestId);
  const res = await call.response;
  if ((res.statusCode ?? 500) >= 300) throw await upstreamError(res);
  let id: unknown;
  try { id = (JSON.parse((await collect(res)).toString('utf8')) as { voice_id?: unknown }).voice_id; } catch { throw upstreamMalformed(); }
  if (typeof id !== 'string' || id === '' || id.length > 256) throw upstreamMalformed();
  return id;
}

/** `DELETE /v1/audio/voices/{id}` (ElevenLabs: `DELETE /v1/voices/{id}`): best effort (a 404 means it is gone already); the stored voice is gone either way. */
export async function removeUpstreamVoice(ups: Upstreams, upstream: string, voiceId: string, requestId: string): Promise<void> {
  try {
    const path = ups.config(upstream).protocol === 'elevenlabs' ? `/v1/voices/${encodeURIComponent(voiceId)}` : `/v1/audio/voices/${encodeURIComponent(voiceId)}`;
    const call = ups.call(upstream, 'DELETE', path, { accept: 'application/json' }, Buffer.alloc(0), requestId);
    const res = await call.response;
    res.resume();
  } catch { /* the upstream keeps an orphan voice; nothing of the tenant's is served from it again */ }
}

/**
 * Clones the voice on every upstream of a pool (its model's name there), one after another, all or
 * nothing: when one fails, the copies already made are removed and its error is thrown.
 */
export async function cloneOnPool(ups: Upstreams, pool: readonly PoolEntry[], r: Omit<CloneRequest, 'upstream' | 'model'>,
  upstreamError: (res: import('node:http').IncomingMessage) => Promise<GatewayError>): Promise<VoiceCopy[]> {
  const copies: VoiceCopy[] = [];
  try {
    for (const e of pool) copies.push({ upstream: e.name, upstreamVoiceId: await cloneVoice(ups, { ...r, upstream: e.name, model: e.upstreamModel }, upstreamError) });
  } catch (err) {
    await removeCopies(ups, copies, r.requestId);
    throw err;
  }
  return copies;
}

/** Removes every upstream's copy of a voice (best effort, each: removeUpstreamVoice). */
export async function removeCopies(ups: Upstreams, copies: readonly VoiceCopy[], requestId: string): Promise<void> {
  await Promise.all(copies.map((c) => removeUpstreamVoice(ups, c.upstream, c.upstreamVoiceId, requestId)));
}

// The voice-cloning contract (docs/upstreams.md): samples in, the upstream's voice id out; and removal.
import type { Upstreams } from './upstream.js';
import { collect, upstreamMalformed } from './upstream.js';
import { streamForm, type StreamedPart } from './form.js';
import type { GatewayError } from '../errors.js';

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

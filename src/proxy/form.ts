// A multipart/form-data body for an upstream call (fields and files, in order): built in memory, or streamed from its parts' sources.
import { Readable } from 'node:stream';
import { base62 } from '../store/ids.js';
import type { StreamedBody } from './upstream.js';

export type FormPart =
  | { name: string; value: string }
  | { name: string; filename: string; contentType: string; data: Buffer };

/** A random form boundary: no part's bytes can contain it by chance. */
export function formBoundary(): string {
  return `tollgate-${base62(24)}`;
}

/** The body and its content type; the boundary is random (or given: one request's forms for several upstreams share one content type). */
export function buildForm(parts: readonly FormPart[], boundary = formBoundary()): { body: Buffer; contentType: string } {
  const chunks: Buffer[] = [];
  for (const p of parts) {
    const name = quoted(p.name);
    if ('data' in p) {
      chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="${quoted(p.filename)}"\r\n`
        + `Content-Type: ${p.contentType.replace(/[\r\n]/g, '')}\r\n\r\n`));
      chunks.push(p.data);
    } else {
      chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${p.value}`));
    }
    chunks.push(Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

function quoted(s: string): string {
  return s.replace(/[\r\n]/g, ' ').replace(/"/g, '%22');
}

/** A file part whose bytes are read when the body is sent: `size` of them, from `read()`. */
export interface StreamedPart { name: string; filename: string; contentType: string; size: number; read: () => AsyncIterable<Buffer> }

/**
 * The same body as `buildForm`, streamed: its length is known before any part is read, and each
 * file's bytes are read as the upstream takes them (one stored chunk at a time).
 */
export function streamForm(parts: readonly ({ name: string; value: string } | StreamedPart)[]): StreamedBody & { contentType: string } {
  const boundary = `tollgate-${base62(24)}`;
  const pieces: (Buffer | StreamedPart)[] = [];
  for (const p of parts) {
    const name = quoted(p.name);
    if ('read' in p) {
      pieces.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="${quoted(p.filename)}"\r\n`
        + `Content-Type: ${p.contentType.replace(/[\r\n]/g, '')}\r\n\r\n`), p);
    } else {
      pieces.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${p.value}`));
    }
    pieces.push(Buffer.from('\r\n'));
  }
  pieces.push(Buffer.from(`--${boundary}--\r\n`));
  const length = pieces.reduce((n, p) => n + (Buffer.isBuffer(p) ? p.length : p.size), 0);
  async function* body(): AsyncGenerator<Buffer> {
    for (const p of pieces) {
      if (Buffer.isBuffer(p)) { yield p; continue; }
      let sent = 0;
      for await (const chunk of p.read()) { sent += chunk.length; yield chunk; }
      // A part whose bytes changed under us would make the declared length a lie.
      if (sent !== p.size) throw new Error(`form part "${p.name}" had ${sent} bytes, not ${p.size}`);
    }
  }
  return { length, stream: Readable.from(body(), { objectMode: false }), contentType: `multipart/form-data; boundary=${boundary}` };
}

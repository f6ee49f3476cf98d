// A multipart/form-data body built in memory for an upstream call (fields and files, in order).
import { base62 } from '../store/ids.js';

export type FormPart =
  | { name: string; value: string }
  | { name: string; filename: string; contentType: string; data: Buffer };

/** The body and its content type; the boundary is random, so no part's bytes can contain it by chance. */
export function buildForm(parts: readonly FormPart[]): { body: Buffer; contentType: string } {
  const boundary = `tollgate-${base62(24)}`;
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

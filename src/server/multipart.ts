// multipart/form-data, read with busboy as it arrives: fields, and files buffered (bounded) or streamed to their consumer.
import { PassThrough, type Readable } from 'node:stream';
import busboy from 'busboy';
import { GatewayError } from '../errors.js';

export interface FilePart {
  field: string;
  filename: string;
  mimeType: string;
  data: Buffer;
}

/** A file handed over as it arrives: fails with 413 past the limit, so a consumer never keeps a cut file. */
export interface StreamedFile {
  field: string;
  filename: string;
  mimeType: string;
  stream: Readable;
}

export interface MultipartOptions {
  /** Bytes one file may have; past it the request fails with 413. */
  maxFileBytes: number;
  maxFiles?: number;
  /** The refusal when there are more than `maxFiles` files (default: 400 invalid_multipart). */
  tooManyFiles?: GatewayError;
  maxFields?: number;
  maxFieldBytes?: number;
  /**
   * Takes each file as a stream instead of buffering it (store it as it comes; resolve when stored).
   * If the request then fails, the consumer undoes what it stored: the rejection says why.
   */
  onFile?: (file: StreamedFile) => Promise<void>;
}

export interface Multipart {
  fields: Map<string, string[]>;
  /** Buffered files, in the order they came (empty when `onFile` took them). */
  files: FilePart[];
  /** A field's last value. */
  field(name: string): string | undefined;
}

export function invalidMultipart(message: string): GatewayError {
  return new GatewayError({ code: 'invalid_multipart', message });
}

function fileTooLarge(field: string, limit: number): GatewayError {
  return new GatewayError({ code: 'request_too_large', param: field,
    message: `The file in "${field}" is larger than this route's limit of ${limit} bytes.` });
}

/**
 * Reads a multipart body (a request stream, or a body already read) into its fields and files. A body
 * that is not multipart/form-data is 415; a malformed one is 400 `invalid_multipart`; a file past the
 * limit is 413. An error of the request stream itself (413, the client leaving) is passed on as it is.
 */
export function readMultipart(input: Readable | Buffer, contentType: string | undefined, opts: MultipartOptions): Promise<Multipart> {
  if (!contentType || !/^multipart\/form-data\s*(;|$)/i.test(contentType)) {
    return Promise.reject(new GatewayError({ code: 'unsupported_media_type',
      message: `This route takes a multipart/form-data body, not ${contentType ? `"${contentType.slice(0, 64)}"` : 'a body without Content-Type'}.` }));
  }
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({
        headers: { 'content-type': contentType }, defParamCharset: 'utf8',
        limits: { fileSize: opts.maxFileBytes + 1, files: opts.maxFiles ?? 32, fields: opts.maxFields ?? 64, fieldSize: opts.maxFieldBytes ?? 1024 * 1024 },
      });
    } catch (e) {
      reject(invalidMultipart(`The multipart body cannot be read: ${(e as Error).message}.`));
      return;
    }
    const fields = new Map<string, string[]>();
    const files: FilePart[] = [];
    const stored: Promise<void>[] = [];
    const open = new Set<PassThrough>();
    let failed = false;
    const fail = (e: unknown): void => {
      if (failed) return;
      failed = true;
      if (!Buffer.isBuffer(input)) { input.unpipe(bb); input.resume(); }
      const err = e instanceof GatewayError ? e : invalidMultipart(`The multipart body cannot be read: ${(e as Error)?.message ?? e}.`);
      // A consumer still reading a file learns that the request failed (and undoes what it stored).
      for (const out of open) out.destroy(err);
      reject(err);
    };
    bb.on('field', (name, value, info) => {
      if (info.valueTruncated) { fail(invalidMultipart(`The field "${name.slice(0, 64)}" is longer than ${opts.maxFieldBytes ?? 1024 * 1024} bytes.`)); return; }
      const list = fields.get(name);
      if (list) list.push(value); else fields.set(name, [value]);
    });
    bb.on('file', (field, file, info) => {
      if (failed) { file.resume(); return; }
      const meta = { field, filename: info.filename ?? '', mimeType: info.mimeType };
      // busboy fails a file cut short (the form ended early) through the file's own stream.
      file.on('error', fail);
      if (opts.onFile) {
        // The consumer reads a copy it can be failed through: busboy's own stream only ever ends.
        const out = new PassThrough();
        // Failed before its consumer reads (a 413, the request cut): the consumer sees it when it reads.
        out.on('error', () => undefined);
        open.add(out);
        out.on('close', () => open.delete(out));
        file.on('limit', () => { const e = fileTooLarge(field, opts.maxFileBytes); out.destroy(e); fail(e); file.resume(); });
        file.pipe(out);
        stored.push(opts.onFile({ ...meta, stream: out }).catch((e: unknown) => { fail(e); file.resume(); }));
        return;
      }
      const parts: Buffer[] = [];
      file.on('data', (c: Buffer) => parts.push(c));
      file.on('limit', () => fail(fileTooLarge(field, opts.maxFileBytes)));
      file.on('end', () => { if (!file.truncated) files.push({ ...meta, data: Buffer.concat(parts) }); });
    });
    const tooMany = (what: string) => () => fail(invalidMultipart(`The multipart body has too many ${what}.`));
    bb.on('filesLimit', opts.tooManyFiles ? () => fail(opts.tooManyFiles) : tooMany('files'));
    bb.on('fieldsLimit', tooMany('fields'));
    bb.on('partsLimit', tooMany('parts'));
    bb.on('error', fail);
    bb.on('close', () => {
      void Promise.all(stored).then(() => {
        if (failed) return;
        resolve({ fields, files, field: (name) => fields.get(name)?.at(-1) });
      });
    });
    if (Buffer.isBuffer(input)) bb.end(input);
    else if (input.errored || input.destroyed) {
      // The request stream failed before this read it (a declared size past the limit, the client gone).
      fail(input.errored ?? invalidMultipart('The request body ended before it could be read.'));
    } else {
      input.on('error', fail);
      input.pipe(bb);
    }
  });
}

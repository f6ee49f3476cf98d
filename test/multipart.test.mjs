// The multipart reader every upload route uses: fields and files, limits, malformed bodies, streamed files.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { readMultipart } from '../dist/server/multipart.js';
import { GatewayError } from '../dist/errors.js';

const BOUNDARY = 'tgboundary42';
const CT = `multipart/form-data; boundary=${BOUNDARY}`;

function form(parts) {
  const chunks = [];
  for (const p of parts) {
    chunks.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${p.name}"`
      + (p.filename !== undefined ? `; filename="${p.filename}"\r\nContent-Type: ${p.type ?? 'application/octet-stream'}` : '') + '\r\n\r\n'));
    chunks.push(Buffer.isBuffer(p.value) ? p.value : Buffer.from(p.value));
    chunks.push(Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${BOUNDARY}--\r\n`));
  return Buffer.concat(chunks);
}

/** The body as a stream that hands it over `size` bytes at a time. */
function trickle(buf, size) {
  let at = 0;
  return new Readable({ read() { this.push(at < buf.length ? buf.subarray(at, (at += size)) : null); } });
}

test('fields and files come back whole, whatever the read size', async () => {
  const audio = Buffer.from(Array.from({ length: 70_000 }, (_, i) => i % 251));
  const body = form([{ name: 'model', value: 'whisper-1' }, { name: 'file', filename: 'a.wav', type: 'audio/wav', value: audio },
    { name: 'labels', value: '{"x":1}' }, { name: 'labels', value: 'second' }]);
  for (const size of [1, 7, 1024, body.length]) {
    const mp = await readMultipart(size === body.length ? body : trickle(body, size), CT, { maxFileBytes: 1 << 20 });
    assert.equal(mp.field('model'), 'whisper-1');
    assert.deepEqual(mp.fields.get('labels'), ['{"x":1}', 'second']);
    assert.equal(mp.files.length, 1);
    assert.equal(mp.files[0].filename, 'a.wav');
    assert.equal(mp.files[0].mimeType, 'audio/wav');
    assert.ok(mp.files[0].data.equals(audio), `file intact at read size ${size}`);
  }
});

test('a file past the limit is 413 naming its field', async () => {
  const body = form([{ name: 'file', filename: 'big.bin', value: Buffer.alloc(5000, 1) }]);
  await assert.rejects(readMultipart(trickle(body, 100), CT, { maxFileBytes: 4096 }),
    (e) => e.status === 413 && e.code === 'request_too_large' && e.param === 'file');
});

test('a body that is not multipart is 415, a malformed or cut one is 400 invalid_multipart', async () => {
  await assert.rejects(readMultipart(Buffer.from('{}'), 'application/json', { maxFileBytes: 10 }), (e) => e.status === 415);
  await assert.rejects(readMultipart(Buffer.from('x'), 'multipart/form-data', { maxFileBytes: 10 }),
    (e) => e.status === 400 && e.code === 'invalid_multipart');
  const body = form([{ name: 'file', filename: 'a.wav', value: Buffer.alloc(3000, 2) }]);
  await assert.rejects(readMultipart(trickle(body.subarray(0, 2000), 333), CT, { maxFileBytes: 1 << 20 }),
    (e) => e.status === 400 && e.code === 'invalid_multipart' && /end of form/i.test(e.message));
});

test('a streamed file reaches its consumer in order, and a cut or oversized one fails the consumer too', async () => {
  const data = Buffer.from(Array.from({ length: 200_000 }, (_, i) => (i * 7) % 256));
  const seen = [];
  const mp = await readMultipart(trickle(form([{ name: 'purpose', value: 'batch' }, { name: 'file', filename: 'in.jsonl', value: data }]), 4096), CT, {
    maxFileBytes: 1 << 20,
    onFile: async ({ field, filename, stream }) => {
      const parts = [];
      for await (const c of stream) parts.push(c);
      seen.push({ field, filename, data: Buffer.concat(parts) });
    },
  });
  assert.equal(mp.field('purpose'), 'batch');
  assert.equal(mp.files.length, 0);
  assert.equal(seen.length, 1);
  assert.ok(seen[0].data.equals(data));

  for (const [body, limit, status] of [
    [form([{ name: 'file', filename: 'in.jsonl', value: data }]), 100_000, 413],
    [form([{ name: 'file', filename: 'in.jsonl', value: data }]).subarray(0, 150_000), 1 << 20, 400],
  ]) {
    let consumerError = null;
    await assert.rejects(readMultipart(trickle(body, 4096), CT, {
      maxFileBytes: limit,
      onFile: async ({ stream }) => {
        try { for await (const _ of stream); } catch (e) { consumerError = e; throw e; }
      },
    }), (e) => e.status === status);
    assert.equal(consumerError?.status, status, 'the consumer saw the failure and can undo what it stored');
  }
});

test('an error of the request stream itself (413, the client leaving) is passed on unchanged', async () => {
  const err = new GatewayError({ status: 413, code: 'request_too_large', message: 'too big' });
  const s = new Readable({ read() {} });
  const p = readMultipart(s, CT, { maxFileBytes: 10 });
  s.push(Buffer.from(`--${BOUNDARY}\r\n`));
  s.destroy(err);
  await assert.rejects(p, (e) => e === err);
});

test('a request stream that failed before it is read (413 on its declared size) is passed on at once, not waited for', async () => {
  const err = new GatewayError({ status: 413, code: 'request_too_large', message: 'declared too big' });
  const s = new Readable({ read() {} });
  s.on('error', () => undefined);
  s.destroy(err);
  await new Promise((r) => setImmediate(r));
  await assert.rejects(readMultipart(s, CT, { maxFileBytes: 10 }), (e) => e === err);
});

test('a streamed file past the limit before its consumer reads it fails the consumer, not the process', async () => {
  const body = form([{ name: 'file', filename: 'big.bin', value: Buffer.alloc(50_000, 3) }]);
  let handed;
  await assert.rejects(readMultipart(trickle(body, 8192), CT, {
    maxFileBytes: 1000,
    // a consumer that takes its time before it starts reading
    onFile: (f) => { handed = f.stream; return new Promise((r) => setTimeout(r, 50)).then(async () => { for await (const _ of f.stream); }); },
  }), (e) => e.status === 413);
  assert.ok(handed.destroyed);
});

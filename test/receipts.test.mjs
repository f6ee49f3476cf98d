// Receipts (issue 28): x-tollgate-cost, the cost in a stream's last usage, signed receipts per request, and the usage export.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createPublicKey, verify } from 'node:crypto';
import WebSocket from 'ws';
import { startGateway, bearer, chatBody, assertInvariants, priceNano, dollarsToNano } from './helpers/gateway.mjs';

/** RFC 8785 for what a receipt holds (strings, whole numbers, booleans, null): sorted keys, no whitespace. */
function canonical(v) {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
}

/** Decimal dollars with 9 decimals, as x-tollgate-cost and receipts write them. */
function fixed9(n) {
  return `${n / 1_000_000_000n}.${(n % 1_000_000_000n).toString().padStart(9, '0')}`;
}

async function receipt(gw, key, id) {
  return gw.fetch(`/svc/v1/requests/${encodeURIComponent(id)}`, { headers: bearer(key) });
}

/** Checks the signature with the published key, exactly as a user would; returns the receipt. */
async function verified(gw, res) {
  assert.equal(res.status, 200);
  const body = await res.json();
  const pub = await (await gw.fetch('/svc/v1/receipts/key')).json();
  assert.equal(pub.alg, 'Ed25519');
  assert.equal(body.signature.key_id, pub.key_id);
  const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(pub.public_key, 'base64').toString('base64url') }, format: 'jwk' });
  assert.ok(verify(null, Buffer.from(canonical(body.receipt)), key, Buffer.from(body.signature.value, 'base64')), 'the signature verifies');
  const forged = { ...body.receipt, cost: '9.999999999' };
  assert.ok(!verify(null, Buffer.from(canonical(forged)), key, Buffer.from(body.signature.value, 'base64')), 'a changed receipt does not');
  return body.receipt;
}

async function sse(res) {
  const text = await res.text();
  return text.split('\n\n').filter((e) => e.includes('data: {')).map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 6)));
}

for (const store of ['postgres', 'pglite']) {
  test(`every request has a signed receipt whose cost is exactly its debit (${store})`, async (t) => {
    const gw = await startGateway(t, { store });
    const { key, account, prefix } = await gw.account('2');
    const other = await gw.account('2');

    // A buffered chat: the cost and units in the headers.
    const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody() });
    assert.equal(res.status, 200);
    const body = await res.json();
    const cost = priceNano(body.usage.prompt_tokens, body.usage.completion_tokens);
    assert.equal(res.headers.get('x-tollgate-cost'), fixed9(cost));
    assert.equal(res.headers.get('x-tollgate-units'), `input_tokens=${body.usage.prompt_tokens},output_tokens=${body.usage.completion_tokens}`);
    const id = res.headers.get('x-request-id');
    const r = await verified(gw, await receipt(gw, key, id));
    assert.equal(r.request_id, id);
    assert.equal(r.account_id, account);
    assert.equal(r.key_prefix, prefix);
    assert.equal(r.route, 'chat.completions');
    assert.equal(r.model, 'sim-chat');
    assert.equal(r.outcome, 'complete');
    assert.deepEqual(r.units, { input_tokens: body.usage.prompt_tokens, output_tokens: body.usage.completion_tokens });
    assert.deepEqual(r.unit_prices, { input_per_mtok: '0.3', output_per_mtok: '2.5', cached_input_per_mtok: '0.3' });
    assert.equal(r.cost, fixed9(cost));
    assert.ok(Date.parse(r.started_at) <= Date.parse(r.ended_at));

    // Another account never reads it, even under the same request id sent by itself.
    assert.equal((await receipt(gw, other.key, id)).status, 404);
    const reused = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(other.key), 'x-request-id': id }, body: chatBody({ max_tokens: 3 }) });
    assert.equal(reused.status, 200);
    const mine = await verified(gw, await receipt(gw, other.key, id));
    assert.equal(mine.account_id, other.account);
    assert.equal((await verified(gw, await receipt(gw, key, id))).cost, fixed9(cost), 'the first account still reads only its own');

    // A stream with usage: the final usage chunk carries the cost (a JSON number), and so does the receipt.
    const st = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody({ stream: true, stream_options: { include_usage: true } }) });
    const events = await sse(st);
    const last = events.at(-1);
    assert.deepEqual(last.choices, []);
    const streamCost = priceNano(last.usage.prompt_tokens, last.usage.completion_tokens);
    assert.equal(typeof last.usage.cost, 'number');
    assert.equal(last.usage.cost, Number(fixed9(streamCost)));
    assert.equal((await verified(gw, await receipt(gw, key, st.headers.get('x-request-id')))).cost, fixed9(streamCost));
    // Without include_usage nothing of it shows (the client did not ask for usage).
    const plainRes = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: bearer(key), body: chatBody({ stream: true }) });
    assert.ok((await sse(plainRes)).every((e) => !e.usage));
    const pr = await verified(gw, await receipt(gw, key, plainRes.headers.get('x-request-id')));
    const plainCost = priceNano(pr.units.input_tokens, pr.units.output_tokens);
    assert.equal(pr.cost, fixed9(plainCost));

    // A Responses stream: response.completed's response.usage.cost.
    const rs = await gw.fetch('/v1/responses', { method: 'POST', headers: bearer(key), body: JSON.stringify({ model: 'sim-chat', input: 'Hello there', stream: true }) });
    const done = (await sse(rs)).at(-1);
    assert.equal(done.type, 'response.completed');
    const rsCost = priceNano(done.response.usage.input_tokens, done.response.usage.output_tokens);
    assert.equal(done.response.usage.cost, Number(fixed9(rsCost)));
    const rr = await verified(gw, await receipt(gw, key, rs.headers.get('x-request-id')));
    assert.equal(rr.route, 'responses');
    assert.equal(rr.cost, fixed9(rsCost));

    // A failed request is free, and has a receipt that says so.
    const failed = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'x-sim-fail-status': '500' }, body: chatBody() });
    assert.ok(failed.status >= 500);
    const fr = await verified(gw, await receipt(gw, key, failed.headers.get('x-request-id')));
    assert.equal(fr.outcome, 'failed');
    assert.equal(fr.cost, '0.000000000');
    assert.deepEqual(fr.units, {});
    assert.equal((await receipt(gw, other.key, failed.headers.get('x-request-id'))).status, 404);
    assert.equal((await receipt(gw, key, 'req_neverexisted1')).status, 404);

    // The usage export: grouped each way, JSON and CSV, the same sums as the ledger.
    const show = await gw.cli('account', 'show', account);
    const spent = 2 - show.balance;
    const total = fixed9(cost + streamCost + rsCost + plainCost);
    assert.equal(Number(total), Number(spent.toFixed(9)));
    for (const by of ['model', 'key', 'route', 'day']) {
      const u = await (await gw.fetch(`/svc/v1/usage?group_by=${by}`, { headers: bearer(key) })).json();
      assert.equal(u.group_by, by);
      const sum = u.data.reduce((a, x) => a + BigInt(x.cost.replace('.', '')), 0n);
      assert.equal(fixed9(sum), total, `grouped by ${by}: the ledger's total`);
      assert.equal(u.data.reduce((a, x) => a + x.requests, 0), 4);
      const csv = await gw.fetch(`/svc/v1/usage?group_by=${by}`, { headers: { ...bearer(key), accept: 'text/csv' } });
      assert.match(csv.headers.get('content-type'), /^text\/csv/);
      const lines = (await csv.text()).trim().split('\r\n');
      assert.equal(lines[0], `${by},requests,cost,input_tokens,output_tokens,characters,audio_in_ms,audio_out_ms`);
      assert.deepEqual(lines.slice(1).map((l) => l.split(',')[2]), u.data.map((x) => x.cost), 'CSV and JSON agree');
    }
    const byRoute = await (await gw.fetch('/svc/v1/usage?group_by=route&format=json', { headers: bearer(key) })).json();
    assert.deepEqual(byRoute.data.map((x) => x.route), ['chat.completions', 'responses']);
    const empty = await (await gw.fetch('/svc/v1/usage?group_by=model&from=2020-01-01&to=2020-01-02', { headers: bearer(key) })).json();
    assert.deepEqual(empty.data, []);
    assert.equal((await gw.fetch('/svc/v1/usage?group_by=colour', { headers: bearer(key) })).status, 400);
    await assertInvariants(assert, gw, account);
  });
}

test('a dropped stream and batch lines have receipts: client_dropped billed what was produced, a failed line free', async (t) => {
  const gw = await startGateway(t, { store: 'pglite', batches: { poll_ms: 50 } });
  const { key, account } = await gw.account('2');
  // A stream the client leaves after a few tokens: billed what was produced, and the receipt says who left.
  const ctl = new AbortController();
  const res = await gw.fetch('/v1/chat/completions', { method: 'POST', headers: { ...bearer(key), 'x-sim-token-delay-ms': '40' },
    body: chatBody({ stream: true, max_tokens: 60 }), signal: ctl.signal });
  const id = res.headers.get('x-request-id');
  const reader = res.body.getReader();
  let text = '';
  while ((text.match(/"content":"[^"]/g) ?? []).length < 4) text += Buffer.from((await reader.read()).value).toString();
  ctl.abort();
  let r;
  for (const until = Date.now() + 5000; Date.now() < until;) {
    const got = await receipt(gw, key, id);
    if (got.status === 200) { r = await verified(gw, got); break; }
    await got.body?.cancel();
    await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.ok(r, 'the dropped stream has a receipt');
  assert.equal(r.outcome, 'client_dropped');
  assert.ok(r.units.output_tokens >= 4 && r.units.output_tokens < 60, `${r.units.output_tokens} tokens produced`);
  assert.equal(r.cost, fixed9(priceNano(r.units.input_tokens, r.units.output_tokens)));
  const show = await gw.cli('account', 'show', account);
  assert.equal(Number((2 - show.balance).toFixed(9)), Number(r.cost), 'the receipt is the whole debit');
  assert.equal(r.route, 'chat.completions');

  // Speech is billed by its whole text once any audio is sent: its cost goes out in the headers, and the receipt matches.
  const voice = await gw.newKey(account, { scopes: 'voice' });
  const spoken = 'Thirty-one characters are here.';
  const tts = await gw.fetch('/beta/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb', { method: 'POST', headers: { 'xi-api-key': voice.key, 'content-type': 'application/json' }, body: JSON.stringify({ text: spoken }) });
  assert.equal(tts.status, 200);
  await tts.arrayBuffer();
  assert.equal(tts.headers.get('x-tollgate-cost'), fixed9(31n * 15n * 1000n), '31 characters at $15 per million');
  assert.equal(tts.headers.get('x-tollgate-units'), 'input_tokens=0,output_tokens=0,characters=31');
  const tr = await verified(gw, await receipt(gw, voice.key, tts.headers.get('x-request-id')));
  assert.deepEqual([tr.route, tr.cost, tr.units], ['beta.tts', fixed9(31n * 15n * 1000n), { characters: 31 }]);
  const timed = await gw.fetch('/beta/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb/stream/with-timestamps', { method: 'POST', headers: { 'xi-api-key': voice.key, 'content-type': 'application/json' }, body: JSON.stringify({ text: spoken }) });
  assert.equal(timed.status, 200);
  await timed.arrayBuffer();
  assert.equal(timed.headers.get('x-tollgate-cost'), fixed9(31n * 15n * 1000n), 'a timestamped stream says its cost up front too');

  // A batch: a line that ran (billed at the batch prices) and a line that failed (free), each by its output's request_id.
  const lines = [
    { custom_id: 'ok-1', method: 'POST', url: '/v1/chat/completions', body: { model: 'sim-chat', messages: [{ role: 'user', content: 'Hello batch' }], max_tokens: 10 } },
    { custom_id: 'bad-1', method: 'POST', url: '/v1/chat/completions', body: { model: 'no-such-model', messages: [{ role: 'user', content: 'Hi' }] } },
  ];
  const form = new FormData();
  form.append('purpose', 'batch');
  form.append('file', new Blob([lines.map((l) => JSON.stringify(l)).join('\n') + '\n']), 'in.jsonl');
  const file = await (await gw.fetch('/v1/files', { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form })).json();
  const created = await (await gw.fetch('/v1/batches', { method: 'POST', headers: bearer(key),
    body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }) })).json();
  let b;
  for (const until = Date.now() + 60_000; Date.now() < until;) {
    b = await (await gw.fetch(`/v1/batches/${created.id}`, { headers: bearer(key) })).json();
    if (b.status === 'completed') break;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.equal(b.status, 'completed');
  const out = JSON.parse((await (await gw.fetch(`/v1/files/${b.output_file_id}/content`, { headers: bearer(key) })).text()).trim());
  const err = JSON.parse((await (await gw.fetch(`/v1/files/${b.error_file_id}/content`, { headers: bearer(key) })).text()).trim());
  const line = await verified(gw, await receipt(gw, key, out.response.request_id));
  assert.equal(line.request_id, out.response.request_id);
  assert.deepEqual(line.batch, { id: b.id, custom_id: 'ok-1' });
  assert.equal(line.route, 'batch.chat.completions');
  const u = out.response.body.usage;
  assert.deepEqual(line.units, { input_tokens: u.prompt_tokens, output_tokens: u.completion_tokens });
  const batchCost = priceNano(u.prompt_tokens, u.completion_tokens, dollarsToNano(line.unit_prices.input_per_mtok), dollarsToNano(line.unit_prices.output_per_mtok));
  assert.equal(line.cost, fixed9(batchCost));
  const bad = await verified(gw, await receipt(gw, key, err.response.request_id));
  assert.equal(bad.outcome, 'failed');
  assert.equal(bad.cost, '0.000000000');
  assert.deepEqual(bad.batch, { id: b.id, custom_id: 'bad-1' });
  const other = await gw.account('1');
  assert.equal((await receipt(gw, other.key, out.response.request_id)).status, 404);
  await assertInvariants(assert, gw, account);
});

test('a realtime session has one receipt listing its parts by seq (each response a part), their units and costs summed', async (t) => {
  const gw = await startGateway(t, { embedded: true });
  const { account } = await gw.cli('account', 'create', '--email', `r${Date.now()}@example.com`, '--credit', '2').then((a) => ({ account: a.account_id }));
  const { key } = await gw.newKey(account, { scopes: 'llm,voice' });
  const frames = await new Promise((resolve, reject) => {
    const ws = new WebSocket(`${gw.url.replace(/^http/, 'ws')}/v1/realtime?model=gpt-realtime`, { headers: bearer(key) });
    const seen = [];
    let responses = 0;
    ws.on('open', () => {
      ws.send(JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello there' }] } }));
      ws.send(JSON.stringify({ type: 'response.create', response: { output_modalities: ['text'], max_output_tokens: 12 } }));
    });
    ws.on('message', (d) => {
      const f = JSON.parse(d.toString());
      seen.push(f);
      if (f.type === 'error') ws.close();
      if (f.type === 'response.done' && ++responses === 1) ws.send(JSON.stringify({ type: 'response.create', response: { output_modalities: ['text'], max_output_tokens: 8 } }));
      else if (f.type === 'response.done') ws.close();
    });
    ws.on('close', () => resolve(seen));
    ws.on('error', reject);
  });
  const done = frames.filter((f) => f.type === 'response.done');
  assert.equal(done.length, 2, JSON.stringify(frames.filter((f) => f.type === 'error')));
  const sessionId = frames.find((f) => f.type === 'session.created').session.id;
  let r;
  for (const until = Date.now() + 5000; Date.now() < until;) {
    const got = await receipt(gw, key, sessionId);
    if (got.status === 200) { r = await verified(gw, got); if (r.parts?.length === 2) break; } else await got.body?.cancel();
    await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.equal(r.request_id, sessionId);
  assert.deepEqual(r.parts.map((p) => p.seq), r.parts.map((p) => p.seq).sort((a, b) => a - b));
  assert.deepEqual(r.parts.map((p) => p.route), ['realtime.response', 'realtime.response']);
  for (const [i, p] of r.parts.entries()) {
    assert.equal(p.units.input_tokens, done[i].response.usage.input_tokens);
    assert.equal(p.units.output_tokens, done[i].response.usage.output_tokens);
  }
  const sum = r.parts.reduce((a, p) => a + dollarsToNano(p.cost), 0n);
  assert.equal(r.cost, fixed9(sum));
  const show = await gw.cli('account', 'show', account);
  assert.equal(Number((2 - show.balance).toFixed(9)), Number(r.cost), 'the session receipt is every debit of the session');
  await assertInvariants(assert, gw, account);
});

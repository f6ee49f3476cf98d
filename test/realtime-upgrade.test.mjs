// WS /alpha/v1/realtime at the upgrade (issue 23, items 7 and 11): made-up client secrets answered from memory, two
// credentials refused, a frame past the limit closed with 1009. (Apart from test/realtime.test.mjs, which is near its time limit.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startGateway, assertInvariants, freshDatabase, balanceNano } from './helpers/gateway.mjs';
import { connect } from './helpers/ws.mjs';

const OPTS = { store: 'pglite' };

function wsUrl(gw, path = '/alpha/v1/realtime', model = 'sim-chat') {
  return `${gw.url.replace(/^http/, 'ws')}${path}${model ? `?model=${model}` : ''}`;
}

async function mint(gw, key, body, path = '/alpha/v1/realtime/client_secrets') {
  const r = await gw.fetch(path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

/**
 * A TCP proxy in front of PostgreSQL that counts the statements clients send through it (each simple
 * Query 'Q', each extended-protocol Sync 'S'): the store round trips a gateway makes, exactly.
 */
async function countingPgProxy(t, target = { host: '127.0.0.1', port: 5432 }) {
  const net = await import('node:net');
  const counter = { statements: 0 };
  const server = net.createServer((client) => {
    const upstream = net.connect(target);
    let buf = Buffer.alloc(0);
    let started = false;
    client.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        if (!started) {
          if (buf.length < 8) break;
          const len = buf.readInt32BE(0);
          if (buf.length < len) break;
          buf = buf.subarray(len);
          started = true;
          continue;
        }
        if (buf.length < 5) break;
        const len = buf.readInt32BE(1);
        if (buf.length < len + 1) break;
        if (buf[0] === 0x51 || buf[0] === 0x53) counter.statements++;
        buf = buf.subarray(len + 1);
      }
      upstream.write(d);
    });
    upstream.on('data', (d) => client.write(d));
    const end = () => { client.destroy(); upstream.destroy(); };
    client.on('error', end); upstream.on('error', end); client.on('close', end); upstream.on('close', end);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { server.close(r); for (const c of server.connections ?? []) c.destroy(); }));
  return { port: server.address().port, counter };
}

test('made-up ek_ client secrets are refused from memory, as made-up keys are: 1,000 of them cost the store almost no statements; a secret minted a moment ago on another instance still opens a session (two gateways on one PostgreSQL)', async (t) => {
  const db = await freshDatabase();
  t.after(() => db.drop());
  const proxy = await countingPgProxy(t);
  const counted = { url: db.url.replace('127.0.0.1:5432', `127.0.0.1:${proxy.port}`) };
  const a = await startGateway(t, { store: 'postgres', database: counted });
  const b = await startGateway(t, { store: 'postgres', database: db });
  const { key, account } = await b.account('1');
  const N = 1000;
  const before = proxy.counter.statements;
  const started = Date.now();
  const statuses = [];
  for (let i = 0; i < N; i += 100) {
    const batch = await Promise.all(Array.from({ length: 100 }, () => connect(wsUrl(a), {
      protocols: ['realtime', `openai-insecure-api-key.ek_${randomBytes(30).toString('base64url').replace(/[-_]/g, 'a').slice(0, 40)}`] })));
    for (const r of batch) { statuses.push(r.refused?.status); if (r.ws) r.ws.close(); }
  }
  const secs = (Date.now() - started) / 1000;
  const statements = proxy.counter.statements - before;
  assert.deepEqual([...new Set(statuses)], [401]);
  // The change feed, recovery and the batch worker poll the store several times a second whatever happens,
  // and misses wait for a read of the secret feed (at most ten a second); before, each made-up secret was
  // one statement more (1,000 here).
  t.diagnostic(`${statements} store statements during ${N} upgrades with made-up ek_ secrets (${secs.toFixed(2)} s)`);
  assert.ok(statements < N / 5, `${statements} statements for ${N} made-up secrets in ${secs.toFixed(2)} s`);
  // A secret minted on the other instance just now opens a session here.
  const m = await mint(b, key, { session: { type: 'realtime', model: 'sim-chat', output_modalities: ['text'] } });
  assert.equal(m.status, 200);
  const s = await connect(wsUrl(a, '/alpha/v1/realtime', null), { protocols: ['realtime', `openai-insecure-api-key.${m.body.value}`] });
  assert.ok(s.ws, JSON.stringify(s.refused));
  assert.equal((await s.until((e) => e.type === 'session.created')).session.model, 'sim-chat');
  s.ws.close();
  await s.closed;
  await assertInvariants(assert, b, account);
});

test('two credentials at the upgrade are refused with 401, as HTTP refuses two keys: a bearer key plus a client secret in the subprotocol, or two different keys in the subprotocols; the same key twice is one', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const { key: other } = await gw.account('1');
  const m = await mint(gw, other, { session: { type: 'realtime', model: 'sim-chat' } });
  assert.equal(m.status, 200);
  const both = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` }, protocols: ['realtime', `openai-insecure-api-key.${m.body.value}`] });
  assert.equal(both.refused?.status, 401, 'no session is opened on one of the two silently');
  assert.equal(both.refused.body.error.code, 'invalid_api_key');
  assert.match(both.refused.body.error.message, /two different credentials/);
  const twoProtocols = await connect(wsUrl(gw), { protocols: ['realtime', `openai-insecure-api-key.${key}`, `alpha-insecure-api-key.${other}`] });
  assert.equal(twoProtocols.refused?.status, 401);
  const same = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` }, protocols: ['realtime', `openai-insecure-api-key.${key}`] });
  assert.ok(same.ws, JSON.stringify(same.refused));
  same.ws.close();
  await same.closed;
  await assertInvariants(assert, gw, account);
});

test('a client frame past the realtime limit (4 MiB) closes the session with 1009 (message too big), not a dropped connection (1006); nothing is billed', async (t) => {
  const gw = await startGateway(t, OPTS);
  const { key, account } = await gw.account('1');
  const before = await balanceNano(gw, account);
  const s = await connect(wsUrl(gw), { headers: { authorization: `Bearer ${key}` } });
  assert.ok(s.ws, JSON.stringify(s.refused));
  await s.until((e) => e.type === 'session.created');
  s.send({ type: 'input_audio_buffer.append', audio: 'A'.repeat(4 * 1024 * 1024 + 1024) });
  const { code } = await s.closed;
  assert.equal(code, 1009);
  assert.equal(await balanceNano(gw, account), before);
  await assertInvariants(assert, gw, account);
});

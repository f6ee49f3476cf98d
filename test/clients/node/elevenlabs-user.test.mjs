// The official `@elevenlabs/elevenlabs-js` client's `user` group against a real gateway on its embedded
// default: `client.user.get()` answers the user object, the account's subscription inside it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ElevenLabsClient, ElevenLabsError } from '@elevenlabs/elevenlabs-js';
import { startGateway } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

function el(key) {
  return new ElevenLabsClient({ apiKey: key, baseUrl: `${gw.url}/beta`, maxRetries: 0, timeoutInSeconds: 30 });
}

test('user.get answers the user object with the subscription inside, as user.subscription.get answers it', async () => {
  const acct = await gw.account('5');
  const client = el(acct.key);
  const user = await client.user.get();
  assert.equal(user.userId, acct.accountId);
  assert.equal(user.isApiKeyHashed, true);
  assert.ok(user.xiApiKeyPreview.startsWith(acct.prefix));
  assert.ok(user.createdAt > 0 && user.createdAt <= Date.now() / 1000);
  const sub = await client.user.subscription.get();
  assert.equal(user.subscription.characterLimit, sub.characterLimit);
  assert.equal(user.subscription.characterLimit, Math.floor(5_000_000 / 30));
  assert.equal(user.subscription.status, 'active');
  assert.equal(user.subscription.voiceLimit, sub.voiceLimit);
});

test('user.get without the voice scope is a typed 403', async () => {
  const acct = await gw.account('1', { scopes: 'llm' });
  await assert.rejects(el(acct.key).user.get(), (e) => e instanceof ElevenLabsError && e.statusCode === 403);
});

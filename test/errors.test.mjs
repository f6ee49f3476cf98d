// The error catalog: each code defined once with its status, type and close code, and each family rendering a session's error as it renders an HTTP one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ERROR_CODES, CLOSE, GatewayError, closeCode, invalidValue, unsupportedParameter, missingParameter, storeUnavailable } from '../dist/errors.js';
import { alpha } from '../dist/families/alpha/family.js';
import { beta } from '../dist/families/beta/family.js';
import { svc } from '../dist/families/svc/family.js';

test('every error code has its status in the catalog, and an error built from a code alone carries it', () => {
  for (const [code, spec] of Object.entries(ERROR_CODES)) {
    assert.ok(Number.isInteger(spec.status) && spec.status >= 400 && spec.status < 600, code);
    const e = new GatewayError({ code, message: 'm' });
    assert.equal(e.status, spec.status, code);
    assert.equal(typeof e.type, 'string', code);
  }
  const rate = new GatewayError({ code: 'rate_limit_exceeded', message: 'slow down' });
  assert.deepEqual([rate.status, rate.type], [429, 'requests']);
  const scope = new GatewayError({ code: 'insufficient_scope', message: 'no' });
  assert.deepEqual([scope.status, scope.type], [403, 'permission_error']);
  assert.deepEqual([storeUnavailable().status, storeUnavailable().type, storeUnavailable().retryable], [503, 'server_error', true]);
  // A family whose protocol says otherwise still overrides the status (beta answers validation with 422).
  const beta422 = new GatewayError({ status: 422, code: 'invalid_value', message: 'x' });
  assert.deepEqual([beta422.status, beta422.type], [422, 'invalid_request_error']);
});

test('the named factories build the catalog codes', () => {
  const cases = [[invalidValue('voice', 'no such voice'), 'invalid_value', 'voice'], [unsupportedParameter('stream', 'no'), 'unsupported_parameter', 'stream'],
    [missingParameter('file', 'send one'), 'missing_required_parameter', 'file']];
  for (const [e, code, param] of cases) {
    assert.ok(e instanceof GatewayError);
    assert.deepEqual([e.status, e.code, e.param, e.type], [400, code, param, 'invalid_request_error']);
  }
});

test('close codes come from one table: a refusal is 1008, a failure 1011, a shutdown 1001', () => {
  assert.deepEqual(CLOSE, { NORMAL: 1000, GOING_AWAY: 1001, POLICY: 1008, TOO_BIG: 1009, INTERNAL: 1011 });
  const close = (code) => closeCode(new GatewayError({ code, message: 'm' }));
  assert.equal(close('insufficient_balance'), 1008);
  assert.equal(close('invalid_api_key'), 1008);
  assert.equal(close('session_idle_timeout'), 1008);
  assert.equal(close('upstream_error'), 1011);
  assert.equal(close('internal_error'), 1011);
  assert.equal(close('shutting_down'), 1001);
});

test('alpha renders a session error as the Realtime API error event, then closes with the code as its reason', () => {
  const e = new GatewayError({ code: 'insufficient_balance', message: 'The balance is spent.' });
  const out = alpha.renderSocket(e, 'req_1');
  const frame = JSON.parse(out.frame);
  assert.match(frame.event_id, /^event_[0-9A-Za-z]{16}$/);
  assert.deepEqual({ ...frame, event_id: undefined }, { event_id: undefined, type: 'error',
    error: { type: 'insufficient_quota', code: 'insufficient_balance', message: 'The balance is spent.', param: null, event_id: null } });
  assert.deepEqual([out.close, out.reason], [1008, 'insufficient_balance']);
  // The same error over HTTP: the same type, code and message in OpenAI's envelope.
  assert.deepEqual(JSON.parse(alpha.render(e, 'req_1')).error, { message: 'The balance is spent.', type: 'insufficient_quota', param: null, code: 'insufficient_balance' });
  assert.deepEqual(svc.renderSocket(e, 'req_1').close, 1008);
});

test('beta renders a session error as ElevenLabs\' error message with the close code in it', () => {
  const e = new GatewayError({ code: 'invalid_api_key', message: 'The key was revoked.' });
  assert.deepEqual(beta.renderSocket(e, 'req_2'), {
    frame: JSON.stringify({ message: 'The key was revoked.', error: 'invalid_api_key', code: 1008 }), close: 1008, reason: 'invalid_api_key' });
  const up = beta.renderSocket(new GatewayError({ code: 'upstream_error', message: 'The speech upstream failed.' }), 'req_3');
  assert.deepEqual([JSON.parse(up.frame).code, up.close], [1011, 1011]);
});

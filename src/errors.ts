// The one error type every stage throws, the catalog of its codes, and the renderer each family provides for its envelope.

/**
 * WebSocket close codes (RFC 6455 §7.4.1), one home for them: 1000 done, 1001 going away (shutdown),
 * 1008 a policy refusal (a bad parameter, the key, the balance, a limit), 1009 a message too big,
 * 1011 the upstream or the gateway failed.
 */
export const CLOSE = { NORMAL: 1000, GOING_AWAY: 1001, POLICY: 1008, TOO_BIG: 1009, INTERNAL: 1011 } as const;
export type CloseCode = (typeof CLOSE)[keyof typeof CLOSE];

/** A code's defaults: its HTTP status, its `type` (absent: the status's, see defaultType) and a session's close code (absent: POLICY). */
export interface CodeSpec { readonly status: number; readonly type?: string; readonly close?: CloseCode }

/**
 * Every error code a client can see (the `code` of the envelope), defined once with its status, type and
 * close code (fastify's lib/errors.js is the model). A new code is added here first; a call site may
 * still override the status or type where a family's protocol says otherwise (beta's 422s).
 */
export const ERROR_CODES = {
  // the request
  invalid_json: { status: 400 }, invalid_encoding: { status: 400 }, invalid_multipart: { status: 400 }, invalid_audio: { status: 400 },
  unsupported_media_type: { status: 415 }, validation_error: { status: 422 }, invalid_value: { status: 400 },
  unsupported_parameter: { status: 400 }, missing_required_parameter: { status: 400 }, batch_not_cancellable: { status: 409 },
  request_too_large: { status: 413, close: CLOSE.TOO_BIG }, storage_quota_exceeded: { status: 413 }, headers_too_large: { status: 431 },
  not_found: { status: 404 }, method_not_allowed: { status: 405 }, not_offered: { status: 404 }, model_not_found: { status: 404 },
  // voices (the beta family)
  invalid_labels: { status: 422 }, voice_not_found: { status: 404 }, sample_not_found: { status: 404, type: 'not_found' },
  voice_limit_reached: { status: 400 }, voice_cloning_unavailable: { status: 400 }, max_character_limit_exceeded: { status: 400 },
  // the key
  invalid_api_key: { status: 401 }, insufficient_scope: { status: 403 },
  // admission
  insufficient_balance: { status: 402 }, key_spend_limit_reached: { status: 402 },
  rate_limit_exceeded: { status: 429, type: 'requests' }, concurrency_limit_exceeded: { status: 429, type: 'requests' },
  // the upstream
  upstream_invalid_request: { status: 400 }, context_length_exceeded: { status: 400 },
  upstream_error: { status: 502, close: CLOSE.INTERNAL }, upstream_unavailable: { status: 502, close: CLOSE.INTERNAL },
  upstream_timeout: { status: 504, close: CLOSE.INTERNAL }, upstream_malformed_response: { status: 502, close: CLOSE.INTERNAL },
  upstream_busy: { status: 503 }, upstream_rate_limited: { status: 429 },
  // payments
  payment_provider_error: { status: 502 }, invalid_signature: { status: 400 }, invalid_event: { status: 400 },
  // the gateway
  shutting_down: { status: 503, close: CLOSE.GOING_AWAY }, limits_unavailable: { status: 503 }, store_unavailable: { status: 503 },
  internal_error: { status: 500, close: CLOSE.INTERNAL }, client_closed: { status: 499 },
  // a session (WebSocket)
  session_idle_timeout: { status: 408 },
} as const satisfies Record<string, CodeSpec>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** A session's error as its family sends it: a frame (null: none), then the close code and reason (at most 123 bytes). */
export interface SocketError { frame: string | null; close: number; reason: string }

/** The same error told with another message (a session's refusal adds what the session was billed). */
export function withMessage(err: GatewayError, message: string): GatewayError {
  return new GatewayError({ status: err.status, code: err.code, type: err.type, param: err.param, retryable: err.retryable, headers: err.headers,
    ...(err.detail ? { detail: err.detail } : {}), message });
}

/** The close code a session ends with for this error. */
export function closeCode(err: GatewayError): number {
  return (ERROR_CODES[err.code] as CodeSpec).close ?? CLOSE.POLICY;
}

/** Renders an error into the body its clients expect: each family has one, used in exactly one place (the response). */
export interface ErrorRenderer {
  render(err: GatewayError, requestId: string): string;
}

export interface ValidationDetail {
  loc: (string | number)[];
  msg: string;
  type: string;
}

export interface GatewayErrorInit {
  /** Absent: the catalog's status for the code. */
  status?: number;
  code: ErrorCode;
  message: string;
  type?: string;
  param?: string | null;
  retryable?: boolean;
  headers?: Record<string, string>;
  detail?: ValidationDetail[];
}

export class GatewayError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  readonly type: string;
  readonly param: string | null;
  readonly retryable: boolean;
  readonly headers: Record<string, string>;
  readonly detail: ValidationDetail[] | undefined;

  constructor(init: GatewayErrorInit) {
    super(init.message);
    const spec: CodeSpec = ERROR_CODES[init.code];
    this.status = init.status ?? spec.status;
    this.code = init.code;
    this.type = init.type ?? spec.type ?? defaultType(this.status);
    this.param = init.param ?? null;
    this.retryable = init.retryable ?? false;
    this.headers = init.headers ?? {};
    this.detail = init.detail;
  }
}

function defaultType(status: number): string {
  if (status === 401) return 'invalid_request_error';
  if (status === 402) return 'insufficient_quota';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

export const STATUS_TEXT: Record<number, string> = {
  200: '200 OK', 201: '201 Created', 202: '202 Accepted', 204: '204 No Content',
  400: '400 Bad Request', 401: '401 Unauthorized', 402: '402 Payment Required', 403: '403 Forbidden',
  404: '404 Not Found', 405: '405 Method Not Allowed', 408: '408 Request Timeout', 409: '409 Conflict', 410: '410 Gone',
  413: '413 Payload Too Large', 431: '431 Request Header Fields Too Large', 415: '415 Unsupported Media Type', 422: '422 Unprocessable Entity',
  429: '429 Too Many Requests', 500: '500 Internal Server Error', 502: '502 Bad Gateway',
  503: '503 Service Unavailable', 504: '504 Gateway Timeout',
};

export function statusLine(status: number): string {
  return STATUS_TEXT[status] ?? `${status} Status`;
}

/** The client left before its answer: nothing is sent and nothing billed (499 is never written, only logged). */
export function clientClosed(): GatewayError {
  return new GatewayError({ code: 'client_closed', message: 'client closed the connection' });
}

/** The limiter's store (Redis) cannot be reached: admission fails closed, and says when to retry. */
export function limitsUnavailable(): GatewayError {
  return new GatewayError({ code: 'limits_unavailable', retryable: true, headers: { 'retry-after': '1' },
    message: 'Rate and spend limits cannot be checked right now, so nothing was run or billed. Retry in a second.' });
}

/** The store (PostgreSQL) cannot be reached and what was asked is not in memory. */
export function storeUnavailable(): GatewayError {
  return new GatewayError({ code: 'store_unavailable', retryable: true, headers: { 'retry-after': '2' },
    message: 'The account store cannot be reached right now, so nothing was run or billed. Retry in a few seconds.' });
}

export function internalError(): GatewayError {
  return new GatewayError({
    code: 'internal_error',
    message: 'The gateway failed to handle this request. It has been logged with its request id.',
  });
}

/** A route of a covered group that this gateway deliberately does not offer (docs/compatibility.md lists them with their reasons). */
export function notOffered(what: string, reason: string): GatewayError {
  return new GatewayError({ code: 'not_offered', message: `${what} is not offered by this gateway: ${reason}` });
}

export function notFound(path: string): GatewayError {
  return new GatewayError({ code: 'not_found', message: `No route for ${path}.` });
}

/** An upload that would take the account's stored bytes (files and voice samples) past its quota: nothing of it is kept. */
export function storageQuotaExceeded(quota: number, used: number, param: string): GatewayError {
  return new GatewayError({ code: 'storage_quota_exceeded', param,
    message: `This upload would bring the account's stored files and voice samples to at least ${used} bytes, past its storage quota of ${quota} bytes. Delete files or voices to make room.` });
}

// ---- named factories for the codes most call sites raise (the status and type come from the catalog) ----

/** A parameter's value is not one this route accepts. */
export function invalidValue(param: string | null, message: string): GatewayError {
  return new GatewayError({ code: 'invalid_value', param, message });
}

/** A parameter this gateway does not support for this route or model. */
export function unsupportedParameter(param: string | null, message: string): GatewayError {
  return new GatewayError({ code: 'unsupported_parameter', param, message });
}

/** A required parameter is absent. */
export function missingParameter(param: string, message: string): GatewayError {
  return new GatewayError({ code: 'missing_required_parameter', param, message });
}

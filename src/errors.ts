// The one error type every stage throws, the catalog of its codes, and the renderer each family provides for its envelope.

/** Every error code a client can see (the `code` of the envelope); a new one is added here first. */
export type ErrorCode =
  // the request
  | 'invalid_json' | 'invalid_encoding' | 'invalid_multipart' | 'invalid_audio' | 'unsupported_media_type' | 'validation_error' | 'invalid_value' | 'unsupported_parameter'
  | 'missing_required_parameter' | 'batch_not_cancellable'
  | 'request_too_large' | 'storage_quota_exceeded' | 'headers_too_large' | 'not_found' | 'method_not_allowed' | 'not_offered'
  | 'model_not_found'
  // voices (the beta family)
  | 'invalid_labels' | 'voice_not_found' | 'sample_not_found' | 'voice_limit_reached' | 'voice_cloning_unavailable' | 'max_character_limit_exceeded'
  // the key
  | 'invalid_api_key' | 'insufficient_scope'
  // admission
  | 'insufficient_balance' | 'key_spend_limit_reached' | 'rate_limit_exceeded' | 'concurrency_limit_exceeded'
  // the upstream
  | 'upstream_invalid_request' | 'context_length_exceeded' | 'upstream_error' | 'upstream_unavailable' | 'upstream_timeout' | 'upstream_malformed_response' | 'upstream_busy'
  // payments
  | 'payment_provider_error' | 'invalid_signature' | 'invalid_event'
  // the gateway
  | 'shutting_down' | 'limits_unavailable' | 'store_unavailable' | 'internal_error' | 'client_closed'
  // a session (WebSocket)
  | 'session_idle_timeout';

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
  status: number;
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
    this.status = init.status;
    this.code = init.code;
    this.type = init.type ?? defaultType(init.status);
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
  return new GatewayError({ status: 499, code: 'client_closed', message: 'client closed the connection' });
}

/** The limiter's store (Redis) cannot be reached: admission fails closed, and says when to retry. */
export function limitsUnavailable(): GatewayError {
  return new GatewayError({ status: 503, code: 'limits_unavailable', type: 'server_error', retryable: true, headers: { 'retry-after': '1' },
    message: 'Rate and spend limits cannot be checked right now, so nothing was run or billed. Retry in a second.' });
}

/** The store (PostgreSQL) cannot be reached and what was asked is not in memory. */
export function storeUnavailable(): GatewayError {
  return new GatewayError({ status: 503, code: 'store_unavailable', type: 'server_error', retryable: true, headers: { 'retry-after': '2' },
    message: 'The account store cannot be reached right now, so nothing was run or billed. Retry in a few seconds.' });
}

export function internalError(): GatewayError {
  return new GatewayError({
    status: 500, code: 'internal_error', type: 'server_error',
    message: 'The gateway failed to handle this request. It has been logged with its request id.',
  });
}

/** A route of a covered group that this gateway deliberately does not offer (docs/compatibility.md lists them with their reasons). */
export function notOffered(what: string, reason: string): GatewayError {
  return new GatewayError({ status: 404, code: 'not_offered', message: `${what} is not offered by this gateway: ${reason}` });
}

export function notFound(path: string): GatewayError {
  return new GatewayError({ status: 404, code: 'not_found', message: `No route for ${path}.` });
}

/** An upload that would take the account's stored bytes (files and voice samples) past its quota: nothing of it is kept. */
export function storageQuotaExceeded(quota: number, used: number, param: string): GatewayError {
  return new GatewayError({ status: 413, code: 'storage_quota_exceeded', param,
    message: `This upload would bring the account's stored files and voice samples to at least ${used} bytes, past its storage quota of ${quota} bytes. Delete files or voices to make room.` });
}

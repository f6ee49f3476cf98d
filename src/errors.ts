// The one error type every stage throws, and each family's envelope rendered in exactly one place.

export type Family = 'alpha' | 'beta' | 'svc';

export interface ValidationDetail {
  loc: (string | number)[];
  msg: string;
  type: string;
}

export interface GatewayErrorInit {
  status: number;
  code: string;
  message: string;
  type?: string;
  param?: string | null;
  retryable?: boolean;
  headers?: Record<string, string>;
  detail?: ValidationDetail[];
}

export class GatewayError extends Error {
  readonly status: number;
  readonly code: string;
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
  404: '404 Not Found', 405: '405 Method Not Allowed', 408: '408 Request Timeout', 409: '409 Conflict',
  413: '413 Payload Too Large', 415: '415 Unsupported Media Type', 422: '422 Unprocessable Entity',
  429: '429 Too Many Requests', 500: '500 Internal Server Error', 502: '502 Bad Gateway',
  503: '503 Service Unavailable', 504: '504 Gateway Timeout',
};

export function statusLine(status: number): string {
  return STATUS_TEXT[status] ?? `${status} Status`;
}

/** Renders an error as the body its family's clients expect. */
export function renderError(err: GatewayError, family: Family, requestId: string): string {
  if (family === 'beta') {
    // ElevenLabs clients read FastAPI-style bodies; 422 carries the validation list as `detail`.
    if (err.status === 422 && err.detail) return JSON.stringify({ detail: err.detail });
    return JSON.stringify({
      detail: { status: err.code, code: err.code, type: err.type, message: err.message, request_id: requestId },
    });
  }
  const body: Record<string, unknown> = {
    error: { message: err.message, type: err.type, param: err.param, code: err.code },
  };
  if (err.detail) body.detail = err.detail;
  return JSON.stringify(body);
}

/** The client left before its answer: nothing is sent and nothing billed (499 is never written, only logged). */
export function clientClosed(): GatewayError {
  return new GatewayError({ status: 499, code: 'client_closed', message: 'client closed the connection' });
}

export function internalError(): GatewayError {
  return new GatewayError({
    status: 500, code: 'internal_error', type: 'server_error',
    message: 'The gateway failed to handle this request. It has been logged with its request id.',
  });
}

export function notFound(path: string): GatewayError {
  return new GatewayError({ status: 404, code: 'not_found', message: `No route for ${path}.` });
}

// JSON log lines on stdout; nothing secret is ever passed in (keys appear only as their prefix).

let requestsEnabled = true;

export function setRequestLogging(on: boolean): void { requestsEnabled = on; }
export function requestLoggingEnabled(): boolean { return requestsEnabled; }

export function log(level: 'info' | 'warn' | 'error', msg: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(`${JSON.stringify({ ts: new Date().toISOString(), level, msg, ...fields }, bigintSafe)}\n`);
}

function bigintSafe(_k: string, v: unknown): unknown {
  return typeof v === 'bigint' ? v.toString() : v;
}

// The operator socket: a running embedded instance owns PGlite, so CLI commands reach the store through it.
import http from 'node:http';
import { existsSync, rmSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { runOp, OpError, type OpsDeps, type OpArgs } from '../ops.js';

export function adminSocketPath(dataDir: string): string {
  return join(dataDir, 'run', 'admin.sock');
}

export async function startAdminSocket(dataDir: string, deps: OpsDeps): Promise<http.Server> {
  const path = adminSocketPath(dataDir);
  if (existsSync(path)) rmSync(path);
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => { body += c; });
    req.on('end', () => {
      void (async () => {
        try {
          const { command, args } = JSON.parse(body) as { command: string; args: OpArgs };
          const out = await runOp(deps, command, args);
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ok: true, result: out }));
        } catch (e) {
          const message = e instanceof OpError ? e.message : `internal error: ${(e as Error).message}`;
          res.writeHead(e instanceof OpError ? 400 : 500, { 'content-type': 'application/json' })
            .end(JSON.stringify({ ok: false, error: message, exit_code: e instanceof OpError ? e.exitCode : 1 }));
        }
      })();
    });
  });
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(path, resolve); });
  chmodSync(path, 0o600);
  return server;
}

export interface AdminReply { ok: boolean; result?: Record<string, unknown>; error?: string; exit_code?: 1 | 2 }

/** Sends one command to a running instance; null when none is listening on this data dir. */
export function callAdmin(dataDir: string, command: string, args: OpArgs): Promise<AdminReply | null> {
  const path = adminSocketPath(dataDir);
  if (!existsSync(path)) return Promise.resolve(null);
  return new Promise((resolve) => {
    const req = http.request({ socketPath: path, method: 'POST', path: '/op', headers: { 'content-type': 'application/json' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { body += c; });
      res.on('end', () => { try { resolve(JSON.parse(body)); } catch { resolve({ ok: false, error: 'bad answer from the running instance' }); } });
    });
    req.on('error', () => resolve(null));
    req.end(JSON.stringify({ command, args }));
  });
}

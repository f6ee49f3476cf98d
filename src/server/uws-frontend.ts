// The uWS front end: uWebSockets.js serves HTTP and WebSocket; its request, response and socket objects
// are the io.ts interface as they are. Loaded from its native binary for this Node's ABI, or not at all.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type uWS from '@trufflesuite/uws-js-unofficial';
import type { FrontEnd, FrontEndHost, Listener } from './io.js';
import type { Session } from './ws.js';

export const UWS_PACKAGE = '@trufflesuite/uws-js-unofficial';
/** The Node ABIs (process.versions.modules) the package has binaries for: Node 16, 18 and 20. */
export const UWS_ABIS: Readonly<Record<string, string>> = { 93: 'Node 16', 108: 'Node 18', 115: 'Node 20' };

type UwsModule = typeof uWS;

/**
 * The package's native binary for this platform, architecture and Node ABI, required directly: the
 * package's own entry falls back to a JavaScript imitation that cannot serve when the binary does not
 * load, so the binary is what says whether uWS runs here. Returns the module, or why it cannot load.
 */
export function loadUws(): { module: UwsModule } | { error: string } {
  const require = createRequire(import.meta.url);
  const name = `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`;
  let file: string;
  try {
    // The package's entry is src/uws.js; its binaries sit in binaries/ beside src/.
    file = join(dirname(require.resolve(UWS_PACKAGE)), '..', 'binaries', name);
  } catch (e) {
    return { error: `${UWS_PACKAGE} is not installed (${(e as Error).message.split('\n')[0]})` };
  }
  if (!existsSync(file)) return { error: `${UWS_PACKAGE} has no binary ${name} for it` };
  try {
    return { module: require(file) as UwsModule };
  } catch (e) {
    return { error: (e as Error).message.split('\n')[0] ?? String(e) };
  }
}

interface SessionData { session: Session }

export function uwsFrontEnd(u: UwsModule): FrontEnd {
  return {
    name: 'uws',
    description: `uWS (uWebSockets.js native, Node ABI ${process.versions.modules})`,
    listen: (host, hostname, port) => listen(u, host, hostname, port),
  };
}

function listen(u: UwsModule, host: FrontEndHost, hostname: string, port: number): Promise<Listener> {
  const app = u.App();
  // Upgrade requests on a WebSocket route's path reach the socket handler; any other request falls through to the HTTP routes.
  app.ws<SessionData>('/*', {
    maxPayloadLength: host.maxSocketMessage,
    idleTimeout: 120,
    sendPingsAutomatically: true,
    maxBackpressure: 64 * 1024 * 1024, // sessions wait for the drain long before this (ws.ts)
    upgrade: (res, req, context) => {
      const secKey = req.getHeader('sec-websocket-key');
      const secExtensions = req.getHeader('sec-websocket-extensions');
      host.upgrade(res, req, (session, protocol) => res.cork(() => res.upgrade({ session }, secKey, protocol, secExtensions, context)));
    },
    open: (ws) => host.opened(ws.getUserData().session, ws),
    // uWS reuses the message's memory once this callback returns: copy it.
    message: (ws, message, isBinary) => host.message(ws.getUserData().session, Buffer.from(message.slice(0)), isBinary),
    drain: (ws) => host.drained(ws.getUserData().session),
    close: (ws, code) => host.closed(ws.getUserData().session, code),
  });
  app.any('/*', (res, req) => host.request(res, req));
  return new Promise<Listener>((resolve, reject) => {
    app.listen(hostname, port, (sock) => {
      if (!sock) { reject(new Error(`cannot listen on ${hostname}:${port}`)); return; }
      let open = true;
      resolve({ port: u.us_socket_local_port(sock), close: () => { if (open) { open = false; u.us_listen_socket_close(sock); } } });
    });
  });
}

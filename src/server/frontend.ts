// Chooses the front end at start: `frontend: uws | node | auto` (config; TOLLGATE_FRONTEND or --frontend
// override it). auto is uWS where its native binary loads on this Node, else node:http. A front end that
// cannot load is refused with what works, so Tollgate never starts in a state that cannot serve.
import { ConfigError } from '../config.js';
import type { FrontEnd } from './io.js';
import { nodeFrontEnd } from './node-frontend.js';
import { UWS_ABIS, UWS_PACKAGE, loadUws, uwsFrontEnd } from './uws-frontend.js';

export type FrontEndChoice = 'auto' | 'uws' | 'node';
export const FRONTEND_ENV = 'TOLLGATE_FRONTEND';
const CHOICES: readonly FrontEndChoice[] = ['auto', 'uws', 'node'];

/** The choice in force: `--frontend`, else TOLLGATE_FRONTEND, else the config's. */
export function frontEndChoice(configured: FrontEndChoice, flag: unknown, env: NodeJS.ProcessEnv = process.env): FrontEndChoice {
  const given = typeof flag === 'string' ? { v: flag, from: '--frontend' } : env[FRONTEND_ENV] ? { v: env[FRONTEND_ENV], from: FRONTEND_ENV } : null;
  if (!given) return configured;
  if (!(CHOICES as readonly string[]).includes(given.v)) throw new ConfigError(`${given.from} must be one of ${CHOICES.join(', ')}, got "${given.v}"`);
  return given.v as FrontEndChoice;
}

/** The front end to serve with, and (for auto) why it is that one. */
export function resolveFrontEnd(choice: FrontEndChoice): { frontEnd: FrontEnd; note: string } {
  if (choice === 'node') return { frontEnd: nodeFrontEnd, note: 'chosen by the frontend setting' };
  const uws = loadUws();
  if ('module' in uws) return { frontEnd: uwsFrontEnd(uws.module), note: choice === 'auto' ? 'auto: its binary loads on this Node' : 'chosen by the frontend setting' };
  if (choice === 'auto') return { frontEnd: nodeFrontEnd, note: `auto: uWS has no build for Node ${process.version} here` };
  throw new ConfigError(uwsUnavailable(uws.error));
}

/** Why uWS cannot serve here, where it can, and what to set or install instead. */
export function uwsUnavailable(error: string): string {
  const here = `Node ${process.version} (${process.platform} ${process.arch}, Node ABI ${process.versions.modules})`;
  const abis = Object.entries(UWS_ABIS).map(([abi, node]) => `${node} (ABI ${abi})`).join(', ');
  return [
    `the uWS front end (frontend: "uws") cannot load on ${here}: ${error}`,
    `  uWS runs where ${UWS_PACKAGE} has a native build: ${abis}, on Linux (x64, arm64, arm), macOS (x64, arm64) and Windows (x64).`,
    '  To serve on this Node, set "frontend": "node" (or "auto") in the config, or TOLLGATE_FRONTEND=node, or --frontend node:',
    '  the node:http front end runs on Node 20, 22 and 24. To keep uWS, run Tollgate on Node 20.',
  ].join('\n');
}

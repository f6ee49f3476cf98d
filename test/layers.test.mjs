// The folder layering: no import circle crosses a folder of src/, and eslint.config.js refuses an import that climbs a floor.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ESLint } from 'eslint';
import { stageGraph, stageCircles } from './helpers/layers.mjs';

const root = new URL('..', import.meta.url).pathname;

test('no import circle crosses a folder of src/', () => {
  assert.deepEqual(stageCircles(stageGraph(`${root}src`)), []);
});

test('the circle finder sees a circle through three stages', () => {
  const g = new Map([['a', new Set(['b'])], ['b', new Set(['c'])], ['c', new Set(['a'])], ['d', new Set(['a'])]]);
  assert.deepEqual(stageCircles(g), [['a', 'b', 'c']]);
});

const cases = [
  ['an exchange module importing a family', 'src/exchange/x.ts', "import { alpha } from '../families/alpha/family.js';\nexport const x = alpha;\n", /exchange sits below families/],
  ['the exchange importing the server', 'src/exchange/x.ts', "import { Router } from '../server/router.js';\nexport const x = Router;\n", /exchange sits below server/],
  ['a family importing jobs', 'src/families/alpha/x.ts', "import { BatchWorker } from '../../jobs/batch-worker.js';\nexport const x = BatchWorker;\n", /families\/ never imports jobs/],
  ['a family importing a value from services', 'src/families/beta/x.ts', "import { openServices } from '../../services.js';\nexport const x = openServices;\n", /families sits below services/],
  ['jobs importing a family', 'src/jobs/x.ts', "import { alpha } from '../families/alpha/family.js';\nexport const x = alpha;\n", /jobs\/ never imports a family/],
  ['the server importing a price', 'src/server/x.ts', "import { price } from '../ledger/pricing.js';\nexport const x = price;\n", /server knows no price/],
  ['the store importing the exchange', 'src/store/x.ts', "import { Charge } from '../exchange/charge.js';\nexport const x = Charge;\n", /store sits below exchange/],
  ['the console importing the simulated upstream', 'src/console/x.ts', "import { startSim } from '../sim/index.js';\nexport const x = startSim;\n", /never imports the simulated upstream/],
  ['SQL in a family', 'src/families/beta/x.ts', "export const q = 'SELECT 1 FROM ledger';\nexport const r = `UPDATE ledger SET amount_nd = 0`;\n", /SQL belongs under src\/store/],
];

test('a deliberate bad import fails lint, and an allowed one passes', async () => {
  const eslint = new ESLint({ cwd: root });
  for (const [what, filePath, code, message] of cases) {
    const [r] = await eslint.lintText(code, { filePath });
    assert.ok(r.messages.some((m) => message.test(m.message)), `${what}: expected ${message}, got ${JSON.stringify(r.messages.map((m) => m.message))}`);
  }
  const allowed = [
    ['src/families/alpha/x.ts', "import type { Services } from '../../services.js';\nimport { Charge } from '../../exchange/charge.js';\nexport type X = Services;\nexport const y = Charge;\n"],
    ['src/store/x.ts', "export const q = 'SELECT 1 FROM ledger';\n"],
    ['src/gate/x.ts', "import { ledgerTotal } from '../store/ledger-reads.js';\nexport const x = ledgerTotal;\n"],
  ];
  for (const [filePath, code] of allowed) {
    const [r] = await eslint.lintText(code, { filePath });
    assert.deepEqual(r.messages.map((m) => m.message), [], filePath);
  }
});

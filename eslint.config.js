// Lint configuration: ESLint's and typescript-eslint's recommended rules over src/, test/ and bench/.
// (Biome was dropped: its per-platform binaries are not all on the registry this project installs
// from, so `npm ci` rejected the lock file it produced.)
import js from "@eslint/js";
import tseslint from "typescript-eslint";

/**
 * The layering of src/, bottom to top (docs: /work/shared/STYLE.md's layout, as the imports really run): a
 * stage imports only the stages on its own floor or below. Each stage is [name, its files, the import
 * patterns that reach it]. Within a floor, a circle is caught by test/layers.test.mjs.
 */
const FLOORS = [
  [["observe", ["src/observe/**"], ["**/observe/**"]], ["money", ["src/money.ts"], ["**/money.js"]], ["errors", ["src/errors.ts"], ["**/errors.js"]],
    ["config-transcription", ["src/config-transcription.ts"], ["**/config-transcription.js"]], ["threads", ["src/threads.ts"], ["**/threads.js"]], ["types", ["src/types/**"], ["**/types/**"]]],
  [["config", ["src/config.ts"], ["**/config.js"]]],
  [["store", ["src/store/**"], ["**/store/**"]], ["audio", ["src/audio/**"], ["**/audio/**"]]],
  [["ledger", ["src/ledger/**"], ["**/ledger/**"]], ["gate", ["src/gate/**"], ["**/gate/**"]], ["resolve", ["src/resolve/**"], ["**/resolve/**"]],
    ["proxy", ["src/proxy/**"], ["**/proxy/**"]]],
  [["exchange", ["src/exchange/**"], ["**/exchange/**"]], ["ops", ["src/ops.ts"], ["**/ops.js"]], ["billing", ["src/billing/**"], ["**/billing/**"]]],
  // A meter implements the exchange's Meter and reports its Usage: it sits just above the exchange.
  [["meter", ["src/meter/**"], ["**/meter/**"]]],
  // The server knows no family and no price; the families use its router, Ctx and Session.
  [["server", ["src/server/**"], ["**/server/**"]]],
  [["families", ["src/families/**"], ["**/families/**"]], ["jobs", ["src/jobs/**"], ["**/jobs/**"]]],
  [["console", ["src/console/**"], ["**/console/**"]], ["sim", ["src/sim/**"], ["**/sim/**"]]],
  [["services", ["src/services.ts"], ["**/services.js"]], ["routes", ["src/routes.ts"], ["**/routes.js"]]],
  [["cli", ["src/cli.ts", "src/cli-hints.ts"], ["**/cli.js", "**/cli-hints.js"]]],
];
/** Imports a stage may not make although the floors allow them (the message says why). */
const EXTRA = {
  families: [{ group: ["**/jobs/**"], message: "families/ never imports jobs/: a family hands its batch endpoints to cli.ts, which gives them to openServices." }],
  jobs: [{ group: ["**/families/**"], message: "jobs/ never imports a family: the batch worker runs what exchange/client.ts's BatchEndpoints hands it." }],
  server: [{ group: ["**/ledger/pricing.js", "**/ledger/published.js"], message: "The server knows no price." }],
  console: [{ group: ["**/sim/**"], message: "Production code never imports the simulated upstream; only services.ts starts it." }],
};

function layerRules() {
  const out = [];
  FLOORS.forEach((floor, level) => {
    const above = FLOORS.slice(level + 1).flat();
    for (const [name, files] of floor) {
      const patterns = [];
      for (const [upper, , groups] of above) {
        // Every stage takes `Services` as a type (a handler's argument); only cli.ts opens them.
        patterns.push({ group: groups, message: `${name} sits below ${upper}: it may not import it (see FLOORS in eslint.config.js).`, ...(upper === "services" ? { allowTypeImports: true } : {}) });
      }
      patterns.push(...(EXTRA[name] ?? []));
      if (patterns.length > 0) out.push({ files, rules: { "@typescript-eslint/no-restricted-imports": ["error", { patterns }] } });
    }
  });
  return out;
}

/** SQL lives under src/store/ (one module per table group); these files still hold their own, by design or until moved. */
const SQL_ELSEWHERE = ["src/ledger/settle.ts", "src/exchange/committer.ts", "src/gate/cache.ts", "src/billing/store.ts"];
const SQL_START = "/^\\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|LOCK|TRUNCATE)\\s/";
const SQL_MESSAGE = "SQL belongs under src/store/: add a function to the store module of that table group.";

// Node's own globals, read from the running Node rather than from another package.
const nodeGlobals = Object.fromEntries(
  Object.getOwnPropertyNames(globalThis).map((name) => [name, "readonly"]),
);

export default tseslint.config(
  { ignores: ["dist/**", "**/node_modules/**", "**/.venv*/**", "test/artifacts/**", "tollgate-data/**", "bench/results/**", ".node-versions/**"] },
  js.configs.recommended,
  {
    files: ["src/**/*.ts"],
    extends: [tseslint.configs.recommended],
    rules: {
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
  ...layerRules(),
  {
    files: ["src/**/*.ts"],
    ignores: ["src/store/**", ...SQL_ELSEWHERE],
    rules: {
      "no-restricted-syntax": ["error",
        { selector: `Literal[value=${SQL_START}]`, message: SQL_MESSAGE },
        { selector: `TemplateLiteral > TemplateElement:first-child[value.raw=${SQL_START}]`, message: SQL_MESSAGE }],
    },
  },
  {
    files: ["**/*.mjs", "**/*.js", "**/*.cjs"],
    languageOptions: { globals: nodeGlobals, sourceType: "module" },
    rules: {
      "no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" }],
    },
  },
  // A --require preload (bench/tail-hooks.cjs) is CommonJS.
  { files: ["**/*.cjs"], languageOptions: { sourceType: "commonjs" } },
  {
    // Browser tests pass functions to page.evaluate(); those run in Chromium, not Node.
    files: ["test/browser/**"],
    languageOptions: { globals: { window: "readonly", document: "readonly", navigator: "readonly" } },
  },
);

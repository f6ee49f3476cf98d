// Lint configuration: ESLint's and typescript-eslint's recommended rules over src/, test/ and bench/.
// (Biome was dropped: its per-platform binaries are not all on the registry this project installs
// from, so `npm ci` rejected the lock file it produced.)
import js from "@eslint/js";
import tseslint from "typescript-eslint";

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
  {
    files: ["**/*.mjs", "**/*.js"],
    languageOptions: { globals: nodeGlobals, sourceType: "module" },
    rules: {
      "no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" }],
    },
  },
  {
    // Browser tests pass functions to page.evaluate(); those run in Chromium, not Node.
    files: ["test/browser/**"],
    languageOptions: { globals: { window: "readonly", document: "readonly", navigator: "readonly" } },
  },
);

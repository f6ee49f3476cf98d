// The folder graph of src/: which stage imports which, and the import circles that cross a folder.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, dirname, resolve } from 'node:path';

/** The stage a source file belongs to: a top-level file is its own stage, a family is a stage, any other folder is one. */
export function stageOf(rel) {
  const parts = rel.split('/');
  if (parts.length === 1) return parts[0].replace(/\.ts$/, '');
  if (parts[0] === 'families' && parts.length > 2) return `families/${parts[1]}`;
  return parts[0];
}

function* tsFiles(dir) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) yield* tsFiles(p);
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) yield p;
  }
}

/** Every relative import in src/ as file -> file edges (paths relative to src/). */
export function fileEdges(srcDir) {
  const edges = [];
  for (const file of tsFiles(srcDir)) {
    const text = readFileSync(file, 'utf8');
    const re = /(?:from\s+|import\s*\(\s*|import\s+)['"](\.{1,2}\/[^'"]+)['"]/g;
    for (const m of text.matchAll(re)) {
      const target = resolve(dirname(file), m[1]).replace(/\.js$/, '.ts');
      edges.push([relative(srcDir, file), relative(srcDir, target)]);
    }
  }
  return edges;
}

/** Stage -> set of stages it imports (self-edges left out). */
export function stageGraph(srcDir) {
  const g = new Map();
  for (const [a, b] of fileEdges(srcDir)) {
    const sa = stageOf(a), sb = stageOf(b);
    if (!g.has(sa)) g.set(sa, new Set());
    if (!g.has(sb)) g.set(sb, new Set());
    if (sa !== sb) g.get(sa).add(sb);
  }
  return g;
}

/** Strongly connected components with more than one stage (Tarjan). */
export function stageCircles(g) {
  let index = 0;
  const idx = new Map(), low = new Map(), onStack = new Set(), stack = [], out = [];
  const visit = (v) => {
    idx.set(v, index); low.set(v, index); index++;
    stack.push(v); onStack.add(v);
    for (const w of g.get(v) ?? []) {
      if (!idx.has(w)) { visit(w); low.set(v, Math.min(low.get(v), low.get(w))); }
      else if (onStack.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const comp = [];
      let w;
      do { w = stack.pop(); onStack.delete(w); comp.push(w); } while (w !== v);
      if (comp.length > 1) out.push(comp.sort());
    }
  };
  for (const v of g.keys()) if (!idx.has(v)) visit(v);
  return out;
}

// `node test/helpers/layers.mjs` prints the circles and the edges inside them.
if (import.meta.url === `file://${process.argv[1]}`) {
  const src = new URL('../../src', import.meta.url).pathname;
  const g = stageGraph(src);
  const circles = stageCircles(g);
  if (circles.length === 0) console.log('no import circle crosses a folder');
  for (const c of circles) {
    console.log(`circle: ${c.join(', ')}`);
    for (const [a, b] of fileEdges(src)) {
      if (stageOf(a) !== stageOf(b) && c.includes(stageOf(a)) && c.includes(stageOf(b))) console.log(`  ${a} -> ${b}`);
    }
  }
}

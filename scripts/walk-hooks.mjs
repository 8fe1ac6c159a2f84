// The hooks of `npm run walk`: the TypeScript sources run as `npm start` runs them (scripts/ts-loader.mjs), with one
// probe at the top of every function of the library (src/), which scripts/walk.ts turns into the walk of a call
// through the files. Text is inserted on the function's own line, so stack traces keep their lines.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { compilerOptions, load as loadTypeScript } from './ts-loader.mjs';

export { resolve } from './ts-loader.mjs';

const LIBRARY = new URL('../src/', import.meta.url).href;
const PROBE = 'globalThis.__idempotencyWalk?.()';

export async function load(url, context, nextLoad) {
  if (!url.startsWith(LIBRARY) || !url.endsWith('.ts')) return loadTypeScript(url, context, nextLoad);
  const fileName = fileURLToPath(url);
  const source = probed(fileName, await readFile(fileName, 'utf8'));
  const { outputText } = ts.transpileModule(source, { fileName, compilerOptions });
  return { format: 'module', source: outputText, shortCircuit: true };
}

/** `source` with the probe first in every function body but constructors' (which may have to call `super` first). */
function probed(fileName, source) {
  const insertions = [];
  const visit = (node) => {
    const body = ts.isFunctionLike(node) && !ts.isConstructorDeclaration(node) ? node.body : undefined;
    if (body && ts.isBlock(body)) insertions.push([body.getStart() + 1, `${PROBE};`]);
    else if (body) insertions.push([body.getStart(), `(${PROBE}, `], [body.end, ')']);
    ts.forEachChild(node, visit);
  };
  visit(ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true));
  let text = source;
  for (const [position, inserted] of insertions.sort(([a], [b]) => b - a)) {
    text = text.slice(0, position) + inserted + text.slice(position);
  }
  return text;
}

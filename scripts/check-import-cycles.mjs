// Fails when TypeScript files of the repository import each other in a cycle (type-only imports count: a cycle of
// types is still two files that cannot be read apart). Part of `npm run lint`: relative imports only, so it reads
// the files without compiling them, in well under a second.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

const ROOT = join(import.meta.dirname, '..');
const FOLDERS = ['src', 'test', 'bench', 'sample-app', 'scripts'];
const RELATIVE_IMPORT = /(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g;

function filesUnder(folder) {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' || entry.name === 'dist' ? [] : filesUnder(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

const files = FOLDERS.map((folder) => join(ROOT, folder))
  .filter(existsSync)
  .flatMap(filesUnder);
const imports = new Map(
  files.map((file) => [
    file,
    [...readFileSync(file, 'utf8').matchAll(RELATIVE_IMPORT)]
      .map(([, specifier]) => join(dirname(file), specifier).replace(/\.js$/, '.ts'))
      .filter(existsSync),
  ]),
);

// Tarjan's strongly connected components: each of more than one file is a cycle.
const order = new Map();
const lowest = new Map();
const stack = [];
const cycles = [];
function visit(file) {
  order.set(file, order.size);
  lowest.set(file, order.get(file));
  stack.push(file);
  for (const imported of imports.get(file)) {
    if (!order.has(imported)) visit(imported);
    if (stack.includes(imported)) lowest.set(file, Math.min(lowest.get(file), lowest.get(imported)));
  }
  if (lowest.get(file) !== order.get(file)) return;
  const component = stack.splice(stack.indexOf(file));
  if (component.length > 1) cycles.push(component.map((path) => relative(ROOT, path)));
}
for (const file of files) if (!order.has(file)) visit(file);

if (cycles.length > 0) {
  for (const cycle of cycles) console.error(`Files that import each other in a cycle: ${cycle.join(', ')}`);
  console.error('Move what the files share into a file of its own, which each imports.');
  process.exit(1);
}
console.log(`Import cycles: none among ${files.length} files`);

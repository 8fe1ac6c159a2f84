// Packs the package as `npm pack` would (building it first) and checks what an adopter installs: the code and types
// that `exports` points at, the licence and the changelog, and source maps that work without the sources (which
// are not shipped). Whether the types resolve for an ESM consumer is checked by examples/, which installs the tarball.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const [pack] = JSON.parse(
  execFileSync('npm', ['pack', '--dry-run', '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }),
);
const shipped = new Set(pack.files.map((file) => file.path));
const { exports, bin = {} } = JSON.parse(readFileSync('package.json', 'utf8'));
const entryPoints = Object.values(exports)
  .flatMap((entry) => Object.values(entry))
  .map((path) => path.replace(/^\.\//, ''));
const problems = [];

const missing = [...entryPoints, 'LICENSE', 'README.md', 'CHANGELOG.md'].filter((path) => !shipped.has(path));
if (missing.length > 0) problems.push(`it would ship without ${missing.join(', ')}`);

// A command's file ships, and starts with its shebang (npm makes it executable when it installs the package).
for (const [name, path] of Object.entries(bin)) {
  const file = path.replace(/^\.\//, '');
  if (!shipped.has(file)) problems.push(`it would ship without ${file}, the ${name} command`);
  else if (!readFileSync(file, 'utf8').startsWith('#!/usr/bin/env node\n')) problems.push(`${file} has no shebang`);
}

const maps = [...shipped].filter((path) => path.endsWith('.js.map'));
for (const path of maps) {
  const { sources, sourcesContent = [] } = JSON.parse(readFileSync(path, 'utf8'));
  if (sources.some((source, index) => typeof sourcesContent[index] !== 'string')) {
    problems.push(`${path} maps to sources it does not carry (${sources.join(', ')})`);
  }
}
if (shipped.has('src') || [...shipped].some((path) => path.startsWith('src/'))) problems.push('it would ship src/');

if (problems.length > 0) {
  console.error(`npm pack (${shipped.size} files): ${problems.join('; ')}`);
  process.exit(1);
}
console.log(
  `npm pack ships ${shipped.size} files, including ${entryPoints.join(', ')}, the ${Object.keys(bin).join(', ')} ` +
    `command, LICENSE and ${maps.length} self-contained source maps`,
);

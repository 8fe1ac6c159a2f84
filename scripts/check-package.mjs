// Packs the package as `npm pack` would (building it first) and checks that what an adopter installs holds the
// code and types that `exports` points at.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const [pack] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
const shipped = new Set(pack.files.map((file) => file.path));
const { exports } = JSON.parse(readFileSync('package.json', 'utf8'));
const expected = Object.values(exports).flatMap((entry) => Object.values(entry)).map((path) => path.replace(/^\.\//, ''));
const missing = expected.filter((path) => !shipped.has(path));
if (missing.length > 0) {
  console.error(`npm pack would ship without ${missing.join(', ')} (${shipped.size} files)`);
  process.exit(1);
}
console.log(`npm pack ships ${shipped.size} files, including ${expected.join(', ')}`);

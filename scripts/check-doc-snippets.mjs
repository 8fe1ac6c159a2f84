// Type-checks the TypeScript of the docs: every ```ts / ```typescript block of README.md and docs/*.md is written to
// a temporary folder as a module of its own and compiled by one `tsc` run, with the compiler options of this
// project's tsconfig.json (NodeNext, strict, decorators) and each entry point of package.json's `exports`
// (`nest-idempotency`, `nest-idempotency/postgres`, …) mapped to its source. A
// block that does not compile fails the check, named by its markdown file and line. Also checks that the relative
// links of those files point at a file and, for a page, at one of its headings. `npm run check:docs`; CI runs it
// (.ci/run).
//
// - A block marked ```ts fragment is not compiled (a piece that continues another block): keep them few, and say in
//   the page why the block is partial.
// - A block holds one file, or several when it names them: a comment line `// name.ts` (`// main.ts: …`) at its
//   left margin starts the file `name.ts`; the lines before the first such comment go to that file. The files of a
//   block sit in one folder, so they import each other as an application's files do (`./charges.service.js`).
// - The application the snippets assume — its module, services, entities, a store of its own — is the stand-ins
//   below (signatures only), written beside every block, in a folder src/ (so that a test's `../src/app.module.js`
//   resolves as well); a file the block writes itself replaces its stand-in.
// - Other blocks (```sh, ```js, ```sql, a plain ```) are not checked.
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, normalize, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const markdownFiles = [
  'README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`),
];

/** The reader's application, as the snippets import it: `./app.module.js`, `./charges.service.js`… */
const STAND_INS = {
  'account-resolver.ts': `
import type { AccountResolver } from 'nest-idempotency';
export declare const accountResolver: AccountResolver;
`,
  'app.module.ts': `
import { Module } from '@nestjs/common';
@Module({})
export class AppModule {}
`,
  'charges.controller.ts': `
import { Controller } from '@nestjs/common';
@Controller('v1/charges')
export class ChargesController {}
`,
  'charge.entity.ts': `
export declare class Charge {
  id: string;
  account: string;
  amount: number;
  currency: string;
  description?: string;
  providerChargeId: string;
}
`,
  'charges.dto.ts': `
export interface ChargeInput {
  amount: number;
  currency: string;
  description?: string;
}
`,
  'charges.service.ts': `
import type { Charge } from './charge.entity.js';
import type { ChargeInput } from './charges.dto.js';
export type { ChargeInput };
export declare class ChargesService {
  create(input: ChargeInput): Promise<Charge>;
}
`,
  'payment-provider.ts': `
export declare class PaymentProvider {
  charge(input: { amount: number; currency: string; idempotencyKey: string }): Promise<string>;
  payout(input: { amount: number; currency: string; idempotencyKey: string }): Promise<string>;
}
`,
  'payout-job.entity.ts': `
export declare class PayoutJob {
  id: string;
  account: string;
  idempotencyKey: string;
  amount: number;
  currency: string;
  status: 'pending' | 'paid';
  payoutId?: string;
}
`,
  'public.decorator.ts': `
export declare function Public(): MethodDecorator & ClassDecorator;
`,
  'signups.service.ts': `
export interface SignUpInput {
  email: string;
}
export declare class SignUpsService {
  create(input: SignUpInput): Promise<{ id: string }>;
}
`,
  'orders.service.ts': `
export interface CreateOrderInput {
  items: { sku: string; quantity: number }[];
  metadata?: { requestedAt?: string };
  traceId?: string;
}
export declare class OrdersService {
  create(input: CreateOrderInput): Promise<{ id: string }>;
}
`,
  'redis-idempotency.store.ts': `
import type { IdempotencyStore } from 'nest-idempotency/store';
export interface RedisConnection {
  quit(): Promise<void>;
}
export declare function connect(url?: string): Promise<RedisConnection>;
export interface RedisIdempotencyStore extends IdempotencyStore {
  close(): Promise<void>;
}
export declare const RedisIdempotencyStore: new (connection: RedisConnection) => RedisIdempotencyStore;
`,
};

/** `@nestjs/config` is not a dependency of this package: the part of it the docs use, when it is not installed. */
const NESTJS_CONFIG_STUB = `
import type { DynamicModule } from '@nestjs/common';
export declare class ConfigModule {
  static forRoot(options?: { isGlobal?: boolean; envFilePath?: string | string[] }): DynamicModule;
}
export declare class ConfigService {
  get<T = any>(propertyPath: string): T | undefined;
  get<T = any>(propertyPath: string, defaultValue: T): T;
  getOrThrow<T = any>(propertyPath: string): T;
}
`;

/** The fenced blocks of a markdown file: { line (of the opening fence, 1-based), lang, attributes, lines }. */
function fencedBlocks(markdown, text) {
  const blocks = [];
  let open = null;
  text.split('\n').forEach((line, index) => {
    if (open === null) {
      const start = /^( *)(`{3,}|~{3,})\s*([^`]*)$/.exec(line);
      if (start === null) return;
      const [lang = '', ...attributes] = start[3].trim().split(/\s+/).filter(Boolean);
      open = {
        line: index + 1,
        indent: start[1].length,
        fence: start[2],
        lang: lang.toLowerCase(),
        attributes,
        lines: [],
      };
      return;
    }
    const end = /^ *(`{3,}|~{3,})\s*$/.exec(line);
    if (end !== null && end[1][0] === open.fence[0] && end[1].length >= open.fence.length) {
      blocks.push(open);
      open = null;
      return;
    }
    // A block inside a list item is indented with it: its lines lose that indentation.
    open.lines.push({
      text: line.slice(Math.min(open.indent, line.length - line.trimStart().length)),
      line: index + 1,
    });
  });
  if (open !== null) problems.push(`${markdown}:${open.line}: the block is never closed`);
  return blocks;
}

/** A block's files: `// name.ts` at the left margin starts one; each line keeps its markdown line. */
function filesOf(block) {
  const files = [];
  for (const line of block.lines) {
    const start = /^\/\/ ([\w.-]+\.ts)\b/.exec(line.text);
    if (start !== null) {
      if (
        files.length === 1 &&
        files[0].name === 'snippet.ts' &&
        files[0].lines.every((l) => /^\s*(\/\/.*)?$/.test(l.text))
      ) {
        files[0].name = start[1]; // comments before the first name: the first file's
      } else {
        files.push({ name: start[1], lines: [] });
      }
    } else if (files.length === 0) {
      files.push({ name: 'snippet.ts', lines: [] });
    }
    files.at(-1).lines.push(line);
  }
  return files;
}

const problems = [];
const folder = mkdtempSync(join(tmpdir(), 'doc-snippets-'));
const where = new Map(); // a written file → { markdown, lines: markdown line of each of its lines }
let checked = 0;
let fragments = 0;
try {
  for (const markdown of markdownFiles) {
    for (const block of fencedBlocks(markdown, readFileSync(join(root, markdown), 'utf8'))) {
      if (block.lang !== 'ts' && block.lang !== 'typescript') continue;
      if (block.attributes.includes('fragment')) {
        fragments += 1;
        continue;
      }
      checked += 1;
      const dir = join(folder, 'blocks', `${markdown.replace(/[^\w]+/g, '-')}-L${block.line}`, 'src');
      mkdirSync(dir, { recursive: true });
      for (const [name, text] of Object.entries(STAND_INS)) writeFileSync(join(dir, name), text.trimStart());
      for (const file of filesOf(block)) {
        const path = join(dir, file.name);
        if (where.has(path)) problems.push(`${markdown}:${block.line}: the block names ${file.name} twice`);
        writeFileSync(path, file.lines.map((l) => l.text).join('\n') + '\n');
        where.set(path, { markdown, lines: file.lines.map((l) => l.line) });
      }
    }
  }

  const { compilerOptions } = JSON.parse(readFileSync(join(root, 'tsconfig.json'), 'utf8'));
  for (const key of ['rootDir', 'outDir', 'sourceMap', 'declaration']) delete compilerOptions[key];
  // Each entry point of package.json's `exports`, at its source: `./x` is `src/x/index.ts`.
  const { exports } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const paths = Object.fromEntries(
    Object.keys(exports).map((entry) => [join('nest-idempotency', entry), [join(root, 'src', entry, 'index.ts')]]),
  );
  if (!existsSync(join(root, 'node_modules/@nestjs/config'))) {
    writeFileSync(join(folder, 'nestjs-config.d.ts'), NESTJS_CONFIG_STUB.trimStart());
    paths['@nestjs/config'] = [join(folder, 'nestjs-config.d.ts')];
  }
  writeFileSync(join(folder, 'package.json'), JSON.stringify({ type: 'module' }));
  writeFileSync(
    join(folder, 'tsconfig.json'),
    JSON.stringify({ compilerOptions: { ...compilerOptions, noEmit: true, paths }, include: ['blocks'] }, null, 2),
  );
  // The packages the snippets import (Nest, TypeORM, supertest…) and the types: the project's own.
  symlinkSync(join(root, 'node_modules'), join(folder, 'node_modules'), 'dir');

  if (checked > 0) {
    let output = '';
    try {
      execFileSync(
        process.execPath,
        [join(root, 'node_modules/typescript/bin/tsc'), '-p', folder, '--pretty', 'false'],
        // In the temporary folder: tsc names files relative to where it runs.
        { cwd: folder, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
      );
    } catch (error) {
      output = `${error.stdout ?? ''}${error.stderr ?? ''}`;
      if (output.trim() === '') throw error;
    }
    // `path(line,col): error TS…: message`, then indented lines that continue the message.
    for (const entry of output.split(/\n(?=\S)/).filter((text) => text.trim() !== '')) {
      const at = /^(.+?)\((\d+),(\d+)\): (.*)$/s.exec(entry);
      const source = at === null ? undefined : where.get(normalize(resolve(folder, at[1])));
      if (at === null || source === undefined) {
        // An error in a stand-in or in src/ itself: shown as tsc gives it, relative to the temporary folder.
        problems.push(entry.replace(/^(.+?)\(/, (_, path) => `${relative(folder, resolve(folder, path))}(`).trim());
        continue;
      }
      problems.push(`${source.markdown}:${source.lines[Number(at[2]) - 1]}:${at[3]}: ${at[4].trim()}`);
    }
  }
} finally {
  rmSync(folder, { recursive: true, force: true });
}

// Relative links: the file exists, and an anchor into a markdown page names one of its headings (GitHub's ids).
const anchorsOf = new Map();
function anchors(path) {
  if (!anchorsOf.has(path)) {
    const ids = new Set();
    const seen = new Map();
    let inBlock = false;
    for (const line of readFileSync(path, 'utf8').split('\n')) {
      if (/^ *(`{3,}|~{3,})/.test(line)) inBlock = !inBlock;
      const heading = inBlock ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
      if (heading === null) continue;
      const id = heading[1]
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, '')
        .replace(/ /g, '-');
      const count = seen.get(id) ?? 0;
      seen.set(id, count + 1);
      ids.add(count === 0 ? id : `${id}-${count}`);
    }
    anchorsOf.set(path, ids);
  }
  return anchorsOf.get(path);
}
let links = 0;
for (const markdown of markdownFiles) {
  const text = readFileSync(join(root, markdown), 'utf8');
  const outsideBlocks = text.replace(/^ *```[\s\S]*?^ *```/gm, (block) => block.replace(/[^\n]/g, ' '));
  for (const link of outsideBlocks.matchAll(/\]\(([^)\s]+)\)/g)) {
    const target = link[1];
    if (/^[a-z][a-z+.-]*:/i.test(target)) continue; // https:, mailto:
    links += 1;
    const line = outsideBlocks.slice(0, link.index).split('\n').length;
    const [file, anchor] = target.split('#');
    const path = file === '' ? join(root, markdown) : resolve(root, dirname(markdown), file);
    if (!existsSync(path)) problems.push(`${markdown}:${line}: the link ${target} points at no file`);
    else if (anchor !== undefined && path.endsWith('.md') && !anchors(path).has(anchor)) {
      problems.push(`${markdown}:${line}: the link ${target}: ${relative(root, path)} has no heading #${anchor}`);
    }
  }
}

if (problems.length > 0) {
  console.error(`Doc snippets and links: ${problems.length} problem(s)\n${problems.map((p) => `  ${p}`).join('\n')}`);
  process.exit(1);
}
console.log(
  `Doc snippets: ${checked} TypeScript blocks of ${markdownFiles.length} files compile (${fragments} marked fragment, not compiled); ${links} relative links resolve`,
);

// ESLint (flat config): typescript-eslint's recommended rules, type-aware where a tsconfig covers the file, and the
// rooms of src/ (docs/layout.md) kept by a rule of this file, `rooms/imports`. eslint-config-prettier comes last:
// formatting is Prettier's (`prettier --check .` runs beside ESLint in `npm run lint`).
import { builtinModules } from 'node:module';
import path from 'node:path';
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

const SRC = path.join(import.meta.dirname, 'src');

// What each room of src/ is, as the messages name it.
const ROOM_NAMES = {
  protocol: 'the protocol (src/protocol)',
  http: 'the HTTP edge (src/http)',
  'transport-kit': "the transports' toolkit (src/transport-kit)",
  postgres: 'the PostgreSQL store (src/postgres)',
  redis: 'the Redis store (src/redis)',
  'store-kit': "the stores' toolkit (src/store-kit)",
  memory: 'the in-memory store (src/memory)',
  testing: 'the testing kit (src/testing)',
  client: 'the client (src/client)',
  messages: 'the message consumers (src/messages)',
  rabbitmq: 'the RabbitMQ consumers (src/rabbitmq)',
  graphql: 'the GraphQL mutations (src/graphql)',
  jetstream: 'the NATS JetStream consumers (src/jetstream)',
  swagger: 'the OpenAPI decorators (src/swagger)',
  terminus: 'the health indicator (src/terminus)',
  cli: 'the command-line tool (src/cli)',
  shared: 'src/shared',
  store: "the store authors' entry point (src/store)",
  observability: 'the observability entry point (src/observability)',
  root: "the module's wiring (the root files of src/)",
};

const HTTP_PLATFORM = ['express', 'fastify', '@fastify/', '@nestjs/platform-'];
const DATABASE = ['typeorm', '@nestjs/typeorm', 'pg', 'ioredis'];
const POSTGRES = ['typeorm', '@nestjs/typeorm', 'pg'];
const NODE = ['node:', ...builtinModules];
const BROKER_CLIENT = ['amqplib', 'amqp-connection-manager', '@nats-io/', 'nats'];

// docs/layout.md: the rooms of src/ each file may import, and the packages it must not. `packages` is a list of
// [what, prefixes] ('x' matches 'x' and 'x/…', a prefix ending in '/' or '-' matches what starts with it); a room
// with `noPackages` imports no package at all (it ships to browsers with no dependencies), and `what` then says
// which kind of package was imported. Files of src/ never import outside src/, nor the package by its own name.
export const ROOMS = {
  protocol: {
    mayImport: ['protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
    ],
  },
  // What the transports share to read a call (its key from a header, its account, its handler's plan, its fingerprint);
  // the protocol never imports it.
  'transport-kit': {
    mayImport: ['transport-kit', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  http: {
    mayImport: ['http', 'transport-kit', 'protocol', 'shared'],
    packages: [['the database (ORM or driver)', DATABASE]],
  },
  postgres: {
    mayImport: ['postgres', 'store-kit', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['Redis', ['ioredis']],
    ],
  },
  // The Redis store, on the application's ioredis client: never TypeORM or pg, which an application on Redis may lack.
  redis: {
    mayImport: ['redis', 'store-kit', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['PostgreSQL (ORM or driver)', POSTGRES],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  // What the stores share to wait for outcomes (waits by scope, polling), knowing no database.
  'store-kit': {
    mayImport: ['store-kit', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  memory: {
    mayImport: ['memory', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
    ],
  },
  // Message consumers, whichever the broker: Nest's microservices, never a broker's client, which each broker's room owns.
  messages: {
    mayImport: ['messages', 'transport-kit', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  rabbitmq: {
    mayImport: ['rabbitmq', 'messages', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
    ],
  },
  jetstream: {
    mayImport: ['jetstream', 'messages', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
    ],
  },
  graphql: {
    mayImport: ['graphql', 'transport-kit', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  // OpenAPI documentation of HTTP routes: it reads the HTTP edge's options and profiles, and loads @nestjs/swagger.
  swagger: {
    mayImport: ['swagger', 'http', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  // The store's health for @nestjs/terminus: the store by its interface, whichever it is.
  terminus: {
    mayImport: ['terminus', 'protocol', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  // The operator's command-line tool: a store's operator on a `pg` or ioredis client, without Nest's app or TypeORM.
  cli: {
    mayImport: ['cli', 'postgres', 'redis', 'store-kit', 'shared'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the ORM', ['typeorm', '@nestjs/typeorm']],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  testing: {
    mayImport: ['testing', 'protocol', 'memory', 'shared'],
    packages: [['the database (ORM or driver)', DATABASE]],
  },
  client: {
    mayImport: ['client', 'shared'],
    noPackages: true,
    packages: [
      ['a Node module', NODE],
      ['Nest', ['@nestjs/']],
      ['rxjs', ['rxjs']],
    ],
  },
  shared: {
    mayImport: ['shared'],
    noPackages: true,
    packages: [
      ['a Node module', NODE],
      ['Nest', ['@nestjs/']],
      ['rxjs', ['rxjs']],
    ],
  },
  // Entry points that re-export the protocol's types for store authors and for observability: no code of their own.
  store: {
    mayImport: ['store', 'protocol'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  observability: {
    mayImport: ['observability', 'protocol'],
    packages: [
      ['an HTTP platform', HTTP_PLATFORM],
      ['the database (ORM or driver)', DATABASE],
      ['a broker client', BROKER_CLIENT],
    ],
  },
  // The main entry point's wiring: every room but the PostgreSQL store, whose entry point is its own, so that an
  // application on another store runs without TypeORM and pg installed.
  root: {
    mayImport: ['root', 'protocol', 'transport-kit', 'http', 'memory', 'shared'],
    packages: [['the database (ORM or driver)', DATABASE]],
  },
};

/** The room (the folder of src/) of a path, 'root' for src/'s own files, null outside src/. */
function roomOf(file) {
  const relative = path.relative(SRC, file);
  if (relative.startsWith('..') || path.isAbsolute(relative)) return null;
  const [first, ...rest] = relative.split(path.sep);
  return rest.length > 0 ? first : 'root';
}

const matches = (specifier, prefix) =>
  prefix.endsWith('/') || prefix.endsWith('-') || prefix.endsWith(':')
    ? specifier.startsWith(prefix)
    : specifier === prefix || specifier.startsWith(`${prefix}/`);

const roomsRule = {
  meta: {
    type: 'problem',
    docs: { description: 'Keeps the rooms of src/ (docs/layout.md): what each room may import' },
    schema: [],
  },
  create(context) {
    const from = roomOf(context.filename);
    if (from === null) return {};
    const room = ROOMS[from];
    const who = from === 'root' ? 'src/' : `src/${from}`;
    if (room === undefined) {
      const message = `${who} is not a room of docs/layout.md: add it there and to ROOMS in eslint.config.js`;
      return { Program: (node) => context.report({ node, message }) };
    }

    function check(node, specifier) {
      if (typeof specifier !== 'string') return;
      const report = (why) => context.report({ node, message: `${who} must not import ${why}: '${specifier}'` });
      if (specifier.startsWith('.') || specifier.startsWith('/')) {
        const target = roomOf(path.resolve(path.dirname(context.filename), specifier));
        if (target === null) report('anything outside src/');
        else if (!room.mayImport.includes(target)) report(ROOM_NAMES[target] ?? `src/${target}`);
        return;
      }
      if (matches(specifier, 'nest-idempotency')) return report('the package by its own name (import the file)');
      const [what] = room.packages.find(([, prefixes]) => prefixes.some((prefix) => matches(specifier, prefix))) ?? [];
      if (what !== undefined) report(what);
      else if (room.noPackages) report('any package (it runs in browsers and ships without dependencies)');
    }

    const source = (node) => check(node.source, node.source?.value);
    return {
      ImportDeclaration: source,
      ExportNamedDeclaration: (node) => node.source && source(node),
      ExportAllDeclaration: source,
      ImportExpression: (node) => check(node.source, node.source.type === 'Literal' ? node.source.value : undefined),
      TSImportType: (node) => check(node.source, node.source.value),
      TSExternalModuleReference: (node) => check(node.expression, node.expression.value),
      'CallExpression[callee.name="require"][arguments.length=1]': (node) =>
        check(node.arguments[0], node.arguments[0].value),
    };
  },
};

export default defineConfig(
  { ignores: ['**/node_modules/', '**/dist/', 'coverage/', '.data/', '.pack/', 'bench/results/'] },
  js.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
      globals: globals.node,
    },
  },
  {
    rules: {
      // A leading underscore marks what is unused on purpose: a property a rest destructuring leaves out, a parameter
      // a decorator or a signature needs.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      // Log lines interpolate caught errors (`unknown`) on purpose, an Error printing as "Error: message";
      // no-base-to-string still flags a value whose type would print "[object Object]".
      '@typescript-eslint/restrict-template-expressions': 'off',
    },
  },
  {
    files: ['src/memory/in-memory-idempotency.store.ts'],
    // An async interface implemented in memory: its methods stay async so that their errors reject, as a database's do.
    rules: { '@typescript-eslint/require-await': 'off' },
  },
  {
    files: ['test/**', 'sample-app/**', 'bench/**'],
    // Async functions without await stand in for promise-returning work (fakes, execute()'s work, waitFor()'s probes).
    rules: { '@typescript-eslint/require-await': 'off' },
  },
  {
    files: ['test/**'],
    // supertest's `res.body` and JSON.parse() are `any`: the tests read them and check them with expect().
    rules: {
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  {
    // Not in a program of this package: examples/ has its own package (and node_modules only while
    // `npm run examples` runs), the .mjs/.js files are plain JavaScript.
    files: ['examples/**', '**/*.mjs', '**/*.js'],
    extends: [tseslint.configs.disableTypeChecked],
  },
  {
    files: ['src/**/*.ts'],
    plugins: { rooms: { rules: { imports: roomsRule } } },
    rules: { 'rooms/imports': 'error' },
  },
  prettier,
);

// Proves that eslint.config.js still keeps the rooms of src/ (docs/layout.md): lints imports that break the table,
// and some the table allows, as if they were written in files of each room, and fails unless exactly the first are
// refused. Part of `npm run lint`; no type information is needed, so it takes a second.
import { readdirSync, readFileSync } from 'node:fs';
import { ESLint } from 'eslint';
import { ROOMS } from '../eslint.config.js';

const RULE = 'rooms/imports';
// [file, import, the message expected, or null where the import is allowed]
const CASES = [
  ['src/protocol/x.ts', '../http/idempotency-http.js', 'src/protocol must not import the HTTP edge (src/http)'],
  ['src/protocol/x.ts', '../postgres/postgres.tokens.js', 'src/protocol must not import the PostgreSQL store'],
  ['src/protocol/x.ts', '../client/index.js', 'src/protocol must not import the client (src/client)'],
  [
    'src/protocol/x.ts',
    '../transport-kit/key-header.js',
    "src/protocol must not import the transports' toolkit (src/transport-kit)",
  ],
  ['src/transport-kit/x.ts', '../http/http-transport.js', 'src/transport-kit must not import the HTTP edge (src/http)'],
  ['src/transport-kit/x.ts', 'express', 'src/transport-kit must not import an HTTP platform'],
  ['src/transport-kit/x.ts', '../protocol/scope-values.js', null],
  ['src/http/x.ts', '../transport-kit/key-header.js', null],
  ['src/messages/x.ts', '../transport-kit/handler-plans.js', null],
  ['src/graphql/x.ts', '../transport-kit/account-resolution.js', null],
  ['src/postgres/x.ts', '../transport-kit/key-header.js', "src/postgres must not import the transports' toolkit"],
  ['src/protocol/x.ts', '../idempotency.module.js', "src/protocol must not import the module's wiring"],
  ['src/protocol/x.ts', 'express', 'src/protocol must not import an HTTP platform'],
  ['src/protocol/x.ts', 'fastify', 'src/protocol must not import an HTTP platform'],
  ['src/protocol/x.ts', '@nestjs/platform-express', 'src/protocol must not import an HTTP platform'],
  ['src/protocol/x.ts', 'typeorm', 'src/protocol must not import the database (ORM or driver)'],
  ['src/protocol/x.ts', '@nestjs/typeorm', 'src/protocol must not import the database (ORM or driver)'],
  ['src/protocol/x.ts', 'pg', 'src/protocol must not import the database (ORM or driver)'],
  ['src/protocol/x.ts', '../shared/canonical-json.js', null],
  ['src/protocol/x.ts', '@nestjs/common', null],
  ['src/http/x.ts', '../postgres/postgres.tokens.js', 'src/http must not import the PostgreSQL store'],
  ['src/http/x.ts', 'typeorm', 'src/http must not import the database (ORM or driver)'],
  ['src/http/x.ts', 'pg', 'src/http must not import the database (ORM or driver)'],
  ['src/http/x.ts', '../protocol/idempotency.service.js', null],
  ['src/http/x.ts', 'express', null],
  ['src/postgres/x.ts', '../http/http.constants.js', 'src/postgres must not import the HTTP edge (src/http)'],
  ['src/postgres/migrations/x.ts', '../../http/x.js', 'src/postgres must not import the HTTP edge (src/http)'],
  ['src/postgres/x.ts', 'express', 'src/postgres must not import an HTTP platform'],
  ['src/postgres/x.ts', 'fastify', 'src/postgres must not import an HTTP platform'],
  ['src/postgres/migrations/x.ts', '../../protocol/idempotency-policy.js', null],
  ['src/postgres/x.ts', 'typeorm', null],
  ['src/postgres/x.ts', '../store-kit/scope-waits.js', null],
  ['src/postgres/x.ts', 'ioredis', 'src/postgres must not import Redis'],
  ['src/redis/x.ts', 'ioredis', null],
  ['src/redis/x.ts', '../store-kit/record-polling.js', null],
  ['src/redis/x.ts', 'typeorm', 'src/redis must not import PostgreSQL (ORM or driver)'],
  ['src/redis/x.ts', 'pg', 'src/redis must not import PostgreSQL (ORM or driver)'],
  ['src/redis/x.ts', '../postgres/postgres.tokens.js', 'src/redis must not import the PostgreSQL store'],
  ['src/redis/x.ts', '../http/http.constants.js', 'src/redis must not import the HTTP edge (src/http)'],
  ['src/store-kit/x.ts', 'ioredis', 'src/store-kit must not import the database (ORM or driver)'],
  ['src/store-kit/x.ts', '../postgres/postgres.tokens.js', 'src/store-kit must not import the PostgreSQL store'],
  ['src/protocol/x.ts', 'ioredis', 'src/protocol must not import the database (ORM or driver)'],
  ['src/client/x.ts', '../protocol/idempotency.errors.js', 'src/client must not import the protocol'],
  ['src/client/x.ts', 'node:crypto', 'src/client must not import a Node module'],
  ['src/client/x.ts', 'crypto', 'src/client must not import a Node module'],
  ['src/client/x.ts', '@nestjs/common', 'src/client must not import Nest'],
  ['src/client/x.ts', 'rxjs', 'src/client must not import rxjs'],
  ['src/client/x.ts', '../shared/canonical-json.js', null],
  ['src/shared/x.ts', '../client/index.js', 'src/shared must not import the client'],
  ['src/shared/x.ts', '../protocol/idempotency.errors.js', 'src/shared must not import the protocol'],
  ['src/protocol/x.ts', '../memory/in-memory-idempotency.store.js', 'src/protocol must not import the in-memory store'],
  ['src/protocol/x.ts', '../testing/store-contract.js', 'src/protocol must not import the testing kit'],
  ['src/http/x.ts', '../memory/in-memory-idempotency.store.js', 'src/http must not import the in-memory store'],
  ['src/memory/x.ts', '../http/http-platform.js', 'src/memory must not import the HTTP edge (src/http)'],
  ['src/memory/x.ts', '../postgres/postgres.tokens.js', 'src/memory must not import the PostgreSQL store'],
  ['src/memory/x.ts', 'typeorm', 'src/memory must not import the database (ORM or driver)'],
  ['src/memory/x.ts', '../protocol/idempotency-store.interface.js', null],
  ['src/testing/x.ts', '../postgres/postgres.tokens.js', 'src/testing must not import the PostgreSQL store'],
  ['src/testing/x.ts', 'pg', 'src/testing must not import the database (ORM or driver)'],
  ['src/testing/x.ts', '../memory/in-memory-idempotency.store.js', null],
  ['src/idempotency.module.ts', './postgres/postgres.tokens.js', 'src/ must not import the PostgreSQL store'],
  ['src/index.ts', 'typeorm', 'src/ must not import the database (ORM or driver)'],
  ['src/idempotency.module.ts', './http/idempotency-http.js', null],
  ['src/idempotency.module.ts', './memory/in-memory-idempotency.store.js', null],
  ['src/messages/x.ts', 'amqplib', 'src/messages must not import a broker client'],
  ['src/messages/x.ts', '@nats-io/jetstream', 'src/messages must not import a broker client'],
  ['src/messages/x.ts', '../rabbitmq/rabbitmq-delivery.js', 'src/messages must not import the RabbitMQ consumers'],
  ['src/messages/x.ts', 'pg', 'src/messages must not import the database (ORM or driver)'],
  ['src/messages/x.ts', '@nestjs/microservices', null],
  ['src/messages/x.ts', '../protocol/idempotency.service.js', null],
  ['src/rabbitmq/x.ts', '../messages/message-transport.js', null],
  ['src/rabbitmq/x.ts', '../http/http-transport.js', 'src/rabbitmq must not import the HTTP edge (src/http)'],
  ['src/rabbitmq/x.ts', 'typeorm', 'src/rabbitmq must not import the database (ORM or driver)'],
  ['src/protocol/x.ts', '../messages/message-transport.js', 'src/protocol must not import the message consumers'],
  ['src/jetstream/x.ts', '../messages/message-transport.js', null],
  ['src/jetstream/x.ts', '@nats-io/jetstream', null],
  ['src/jetstream/x.ts', '../rabbitmq/rabbitmq-delivery.js', 'src/jetstream must not import the RabbitMQ consumers'],
  ['src/jetstream/x.ts', '../http/http-transport.js', 'src/jetstream must not import the HTTP edge (src/http)'],
  ['src/jetstream/x.ts', 'pg', 'src/jetstream must not import the database (ORM or driver)'],
  ['src/jetstream/x.ts', 'express', 'src/jetstream must not import an HTTP platform'],
  ['src/messages/x.ts', '../jetstream/jetstream-context.js', 'src/messages must not import the NATS JetStream'],
  ['src/idempotency.module.ts', './jetstream/index.js', 'src/ must not import the NATS JetStream consumers'],
  ['src/idempotency.module.ts', './rabbitmq/index.js', 'src/ must not import the RabbitMQ consumers'],
  ['src/graphql/x.ts', 'graphql', null],
  ['src/swagger/x.ts', '@nestjs/swagger', null],
  ['src/swagger/x.ts', '../http/http-policy.js', null],
  ['src/swagger/x.ts', '../postgres/postgres.tokens.js', 'src/swagger must not import the PostgreSQL store'],
  ['src/swagger/x.ts', 'express', 'src/swagger must not import an HTTP platform'],
  ['src/swagger/x.ts', 'typeorm', 'src/swagger must not import the database (ORM or driver)'],
  ['src/http/x.ts', '../swagger/index.js', 'src/http must not import the OpenAPI decorators'],
  ['src/idempotency.module.ts', './swagger/index.js', 'src/ must not import the OpenAPI decorators'],
  ['src/graphql/x.ts', '../protocol/idempotency.service.js', null],
  ['src/graphql/x.ts', '../http/http-transport.js', 'src/graphql must not import the HTTP edge (src/http)'],
  ['src/graphql/x.ts', '../messages/message-transport.js', 'src/graphql must not import the message consumers'],
  ['src/graphql/x.ts', 'express', 'src/graphql must not import an HTTP platform'],
  ['src/graphql/x.ts', 'typeorm', 'src/graphql must not import the database (ORM or driver)'],
  ['src/idempotency.module.ts', './graphql/index.js', 'src/ must not import the GraphQL mutations'],
  ['src/terminus/x.ts', '@nestjs/terminus', null],
  ['src/terminus/x.ts', '../protocol/idempotency.tokens.js', null],
  ['src/terminus/x.ts', '../postgres/postgres.tokens.js', 'src/terminus must not import the PostgreSQL store'],
  ['src/terminus/x.ts', '../memory/in-memory-idempotency.store.js', 'src/terminus must not import the in-memory'],
  ['src/terminus/x.ts', 'pg', 'src/terminus must not import the database (ORM or driver)'],
  ['src/terminus/x.ts', 'express', 'src/terminus must not import an HTTP platform'],
  ['src/idempotency.module.ts', './terminus/index.js', 'src/ must not import the health indicator'],
  ['src/postgres/x.ts', '../terminus/index.js', 'src/postgres must not import the health indicator'],
  ['src/cli/x.ts', '../postgres/idempotency-operator.js', null],
  ['src/cli/x.ts', 'pg', null],
  ['src/cli/x.ts', '../redis/redis-operator.js', null],
  ['src/cli/x.ts', 'ioredis', null],
  ['src/cli/x.ts', '../store-kit/operator-records.js', null],
  ['src/cli/x.ts', 'node:util', null],
  ['src/cli/x.ts', '../protocol/idempotency.service.js', 'src/cli must not import the protocol'],
  ['src/cli/x.ts', '../http/http-transport.js', 'src/cli must not import the HTTP edge (src/http)'],
  ['src/cli/x.ts', 'typeorm', 'src/cli must not import the ORM'],
  ['src/cli/x.ts', 'express', 'src/cli must not import an HTTP platform'],
  ['src/postgres/x.ts', '../cli/operator-cli.js', 'src/postgres must not import the command-line tool'],
  ['test/unit/x.spec.ts', '../../src/http/idempotency-http.js', null],
];
// Every way a module is named: import, type import, re-export, dynamic import, import type.
const FORMS = [
  (from) => `import { a } from '${from}';\nexport const b = a;`,
  (from) => `import type { A } from '${from}';\nexport type B = A;`,
  (from) => `export * from '${from}';`,
  (from) => `export const load = () => import('${from}');`,
  (from) => `export type C = import('${from}').C;`,
];

const eslint = new ESLint({
  overrideConfig: { languageOptions: { parserOptions: { projectService: false } } },
  ruleFilter: ({ ruleId }) => ruleId === RULE,
});
const failures = [];
for (const [file, from, expected] of CASES) {
  for (const form of FORMS) {
    const code = form(from);
    const [result] = await eslint.lintText(code, { filePath: file });
    const messages = result.messages.map(({ ruleId, message }) => `${ruleId}: ${message}`);
    const ok =
      expected === null
        ? messages.length === 0
        : messages.length === 1 && messages[0].startsWith(`${RULE}: ${expected}`) && messages[0].endsWith(`'${from}'`);
    if (!ok) {
      failures.push(
        `${file}: ${JSON.stringify(code)}: expected ${expected ?? 'no message'}, got ${messages.join('; ')}`,
      );
    }
  }
}
// The layout page's table, the rule's rooms and the folders of src/ name the same rooms.
const folders = readdirSync('src', { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name);
const documented = [...readFileSync('docs/layout.md', 'utf8').matchAll(/^\| `src\/([a-z-]+)\/` \|/gm)].map(
  ([, room]) => room,
);
const ruled = Object.keys(ROOMS).filter((room) => room !== 'root');
for (const [what, rooms] of [
  ['folders of src/', folders],
  ['rows of docs/layout.md', documented],
]) {
  const missing = ruled.filter((room) => !rooms.includes(room));
  const extra = rooms.filter((room) => !ruled.includes(room));
  if (missing.length > 0 || extra.length > 0) {
    failures.push(
      `the ${what} differ from ROOMS in eslint.config.js: missing ${missing.join(', ') || 'none'}, not a room ${extra.join(', ') || 'none'}`,
    );
  }
}
if (failures.length > 0) {
  console.error(`${RULE} does not keep the rooms of src/:\n${failures.join('\n')}`);
  process.exit(1);
}
console.log(
  `${RULE}: ${CASES.length * FORMS.length} imports checked, each refused or allowed as docs/layout.md says; its table names every folder of src/`,
);

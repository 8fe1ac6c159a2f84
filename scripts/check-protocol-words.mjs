// Fails when a file of src/protocol names what sits above the protocol: a transport or a platform (HTTP, GraphQL, a
// broker), a store or its database, or HTTP's rule of final statuses. The protocol knows them only by their
// interfaces; a word here is the first step of a dependency the import rule would catch too late. Part of
// `npm run lint`; it reads comments as well as code, since a comment that names a transport is a rule in disguise.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const ROOT = join(import.meta.dirname, '..');
const PROTOCOL = join(ROOT, 'src', 'protocol');
const NAMES = [
  [
    'a transport or platform',
    /\b(?:HTTP|https?|GraphQL|graphql|RabbitMQ|rabbitmq|AMQP|amqp|JetStream|jetstream|NATS|nats|Express|express|Fastify|fastify)\b/,
  ],
  ['a store or its database', /\b(?:PostgreSQL|Postgres|postgres|TypeORM|typeorm|pg|Redis|redis|ioredis)\b/],
  ["HTTP's rule of final statuses", /\bisFinalStatus\b|\b(?:408|425|429)\b/],
];

const found = readdirSync(PROTOCOL)
  .filter((name) => name.endsWith('.ts'))
  .flatMap((name) => {
    const file = join(PROTOCOL, name);
    return readFileSync(file, 'utf8')
      .split('\n')
      .flatMap((line, index) =>
        NAMES.filter(([, pattern]) => pattern.test(line)).map(
          ([what, pattern]) => `${relative(ROOT, file)}:${index + 1} names ${what} ("${line.match(pattern)[0]}")`,
        ),
      );
  });

if (found.length > 0) {
  console.error(`src/protocol knows no transport, store or status rule by name:\n${found.join('\n')}`);
  process.exit(1);
}
console.log(
  `Protocol words: ${readdirSync(PROTOCOL).length} files of src/protocol name no transport, store or status rule`,
);

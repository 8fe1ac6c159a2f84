import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  IdempotencyModule,
  IdempotencySetupError,
  type IdempotencyModuleOptions,
  IdempotencyService,
} from '../../src/index.js';
import { idempotencyMigrations, IdempotencyPostgresModule } from '../../src/postgres/index.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { useTestDatabase } from '../support/test-database.js';

const db = useTestDatabase();
const logger = new RecordingLogger();

type Registration = 'forRoot' | 'forRootAsync';

/** Builds an application module with `options`, closing it again when it starts; rejects when it refuses to. */
async function start(options: IdempotencyModuleOptions, registration: Registration): Promise<void> {
  const idempotency =
    registration === 'forRoot'
      ? IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot(), ...options })
      : IdempotencyModule.forRootAsync({ store: IdempotencyPostgresModule.forRoot(), useFactory: async () => options });
  const moduleRef = await Test.createTestingModule({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: db.url,
        migrations: idempotencyMigrations(),
        migrationsRun: true,
      }),
      idempotency,
    ],
  })
    .setLogger(logger)
    .compile();
  const context = await moduleRef.init();
  expect(context.get(IdempotencyService)).toBeInstanceOf(IdempotencyService);
  await context.close();
}

describe.each<Registration>(['forRoot', 'forRootAsync'])('tenancy, with %s', (registration) => {
  it('refuses to start without accountResolver or singleTenant, naming both', async () => {
    await expect(start({}, registration)).rejects.toThrow(
      /IdempotencyModule needs to know who a key belongs to: pass `accountResolver`.*`singleTenant: true`/,
    );
  });

  it('refuses with an IdempotencySetupError, the error of set-up mistakes', async () => {
    await expect(start({}, registration)).rejects.toBeInstanceOf(IdempotencySetupError);
  });

  it('refuses to start with singleTenant: false and no accountResolver', async () => {
    await expect(start({ singleTenant: false }, registration)).rejects.toThrow(/needs to know who a key belongs to/);
  });

  it('refuses to start with both, which contradict each other', async () => {
    await expect(start({ singleTenant: true, accountResolver: () => 'acct' }, registration)).rejects.toThrow(
      /both `accountResolver` and `singleTenant: true`/,
    );
  });

  it('starts with accountResolver', async () => {
    await start({ accountResolver: () => 'acct' }, registration);
  });

  it('starts with singleTenant: true', async () => {
    await start({ singleTenant: true }, registration);
  });
});

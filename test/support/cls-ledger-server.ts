import 'reflect-metadata';
import { Controller, Headers, Injectable, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsPluginTransactional, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ClsModule } from 'nestjs-cls';
import { Idempotent, IdempotencyModule } from '../../src/index.js';
import {
  idempotencyMigrations,
  IdempotencyPostgresModule,
  PostgresIdempotencyContext,
} from '../../src/postgres/index.js';
import { LedgerEntry } from './ledger-entry.entity.js';

/**
 * Ledger routes written for `@nestjs-cls/transactional`, in an app with `enlistDataSource: true`, served on
 * `PORT` over `DATABASE_URL` by a process of its own: Jest cannot load that package (CommonJS that requires
 * the ESM-only Nest 12), while Node can.
 */

/** Writes through `txHost.tx`: the transaction of the enclosing `@Transactional()` method, else the data source's manager. */
@Injectable()
class ClsLedgerService {
  constructor(private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>) {}

  async record(key: string): Promise<void> {
    await this.txHost.tx.getRepository(LedgerEntry).save({ key });
  }

  @Transactional()
  async recordInTransaction(key: string): Promise<void> {
    await this.record(key);
  }
}

/** Each route writes, then throws when the request says `X-Fail: true` (a header, so that the retry is the same request). */
@Controller('cls-ledger')
@Idempotent({ transactional: true })
class ClsLedgerController {
  constructor(
    private readonly ledger: ClsLedgerService,
    private readonly context: PostgresIdempotencyContext,
  ) {}

  @Post('tx')
  async tx(@Headers('x-fail') fail?: string) {
    await this.ledger.record(this.context.run!.key);
    return this.answer(fail);
  }

  @Post('transactional')
  async transactional(@Headers('x-fail') fail?: string) {
    await this.ledger.recordInTransaction(this.context.run!.key);
    return this.answer(fail);
  }

  private answer(fail: string | undefined) {
    if (fail === 'true') throw new Error('the handler failed after writing');
    return { written: this.context.run!.key };
  }
}

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [LedgerEntry],
      migrations: idempotencyMigrations(),
      migrationsRun: true,
    }),
    IdempotencyModule.forRoot({
      store: IdempotencyPostgresModule.forRoot({ enlistDataSource: true, onTransactionEscape: 'throw' }),
      singleTenant: true,
    }),
    ClsModule.forRoot({
      global: true,
      middleware: { mount: true },
      plugins: [
        new ClsPluginTransactional({
          imports: [TypeOrmModule],
          adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
        }),
      ],
    }),
  ],
  controllers: [ClsLedgerController],
  providers: [ClsLedgerService],
})
class ClsLedgerModule {}

const app = await NestFactory.create(ClsLedgerModule, { rawBody: true, logger: ['error'] });
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
console.log(`listening on port ${new URL(await app.getUrl()).port}`);

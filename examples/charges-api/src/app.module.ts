import { Module } from '@nestjs/common';
import { ConfigModule, ConfigService } from '@nestjs/config';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IdempotencyModule } from 'nest-idempotency';
import { idempotencyMigrations, IdempotencyPostgresModule } from 'nest-idempotency/postgres';
import type { AccountRequest } from './account.guard.js';
import { Charge } from './charge.entity.js';
import { ChargesController } from './charges.controller.js';
import { ChargesService } from './charges.service.js';
import { CreateCharges1767000000000 } from './migrations/1767000000000-create-charges.js';
import { PaymentProvider } from './payment-provider.js';

@Module({
  imports: [
    ConfigModule.forRoot(),
    TypeOrmModule.forRootAsync({
      imports: [ConfigModule],
      inject: [ConfigService],
      useFactory: (config: ConfigService) => ({
        type: 'postgres',
        url: config.getOrThrow<string>('DATABASE_URL'),
        entities: [Charge],
        migrations: [...idempotencyMigrations(), CreateCharges1767000000000],
        migrationsRun: true,
      }),
    }),
    TypeOrmModule.forFeature([Charge]),
    IdempotencyModule.forRootAsync({
      // The records live on the TypeORM data source above; the handler's writes join the run's transaction
      // (enlistDataSource: repositories injected with @InjectRepository() included), and a write that would escape it
      // fails instead of committing on its own.
      store: IdempotencyPostgresModule.forRoot({ enlistDataSource: true, onTransactionEscape: 'throw' }),
      imports: [ConfigModule],
      inject: [ConfigService],
      useFactory: (config: ConfigService) => ({
        // Keys are scoped by the account AccountGuard authenticated (the resolver runs after guards).
        accountResolver: (context) => context.switchToHttp().getRequest<AccountRequest>().account,
        // The handler's writes and its stored response commit together, or not at all.
        transactional: true,
        ttlSeconds: Number(config.get('IDEMPOTENCY_TTL_SECONDS', 86_400)),
        // 'conflict' (409 while a key is in progress) or 'wait' (wait for the first attempt's outcome).
        inFlight: inFlightMode(config.get<string>('IDEMPOTENCY_IN_FLIGHT', 'conflict')),
      }),
    }),
  ],
  controllers: [ChargesController],
  providers: [ChargesService, PaymentProvider],
})
export class AppModule {}

function inFlightMode(value: string): 'conflict' | 'wait' {
  if (value !== 'conflict' && value !== 'wait') {
    throw new Error(`IDEMPOTENCY_IN_FLIGHT must be "conflict" or "wait", got "${value}"`);
  }
  return value;
}

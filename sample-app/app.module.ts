import { type DynamicModule, type MiddlewareConsumer, Module, type NestModule } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { GraphQLModule } from '@nestjs/graphql';
import { TerminusModule } from '@nestjs/terminus';
import { IdempotencyGraphQLModule } from '../src/graphql/index.js';
import { IdempotencyModule } from '../src/index.js';
import { idempotencyMigrations, IdempotencyPostgresModule } from '../src/postgres/index.js';
import { IdempotencyHealthModule } from '../src/terminus/index.js';
import { accountOf } from './auth/account-of.js';
import { ApiKeyGuard } from './auth/api-key.guard.js';
import { payoutBrokers } from './brokers/payout-brokers.js';
import { Charge } from './charges/charge.entity.js';
import { ChargeCompletions } from './charges/charge-completions.js';
import { ChargesController } from './charges/charges.controller.js';
import { ChargesResolver } from './charges/charges.resolver.js';
import { ChargesService } from './charges/charges.service.js';
import { HealthController } from './health.controller.js';
import { DropFirstResponseMiddleware } from './page/drop-first-response.middleware.js';
import { OperatorController } from './operator/operator.controller.js';
import { OperatorTokenGuard } from './operator/operator-token.guard.js';
import { PageController } from './page/page.controller.js';
import { CreateSampleSchema1764633600001 } from './migrations/create-sample-schema.migration.js';
import { AddReceipts1796774400001 } from './migrations/add-receipts.migration.js';
import { ExternalLedger } from './external-ledger.js';
import { FakePaymentProvider, PAYMENT_PROVIDER, type PaymentProvider } from './payment-provider.js';
import { FakeReceiptMailer, RECEIPT_MAILER } from './receipt-mailer.js';
import { PayoutJob } from './payouts/payout-job.entity.js';
import { PayoutRequestsConsumer } from './payouts/payout-requests.consumer.js';
import { PayoutWorker } from './payouts/payout-worker.js';
import { PayoutsController } from './payouts/payouts.controller.js';
import { Refund } from './refunds/refund.entity.js';
import { RefundsController } from './refunds/refunds.controller.js';
import { RefundsService } from './refunds/refunds.service.js';
import { SAMPLE_CONFIG, type SampleConfig } from './sample-config.js';

export const SAMPLE_MIGRATIONS = [
  ...idempotencyMigrations(),
  CreateSampleSchema1764633600001,
  AddReceipts1796774400001,
];

@Module({})
export class AppModule implements NestModule {
  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(DropFirstResponseMiddleware).forRoutes('*');
  }

  /** `paymentProvider` replaces the fake provider (whose latency is `config.providerDelayMs`). */
  static forRoot(config: SampleConfig, paymentProvider?: PaymentProvider): DynamicModule {
    const brokers = payoutBrokers(config);
    return {
      module: AppModule,
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: config.databaseUrl,
          entities: [Charge, Refund, PayoutJob],
          migrations: SAMPLE_MIGRATIONS,
          synchronize: false,
          // Fail fast when the database is down, so requests get a 503 instead of hanging.
          extra: { max: config.databasePoolSize, connectionTimeoutMillis: 3000 },
        }),
        IdempotencyModule.forRoot({
          store: IdempotencyPostgresModule.forRoot({
            transactionPooler: config.transactionPooler,
            listenConnection: config.databaseDirectUrl,
          }),
          ttlSeconds: config.ttlSeconds,
          leaseSeconds: config.leaseSeconds,
          transactional: config.transactional,
          inFlight: config.inFlight,
          profile: config.profile,
          shutdownTimeoutSeconds: config.shutdownTimeoutSeconds,
          completer: {
            intervalSeconds: config.completerIntervalSeconds,
            backoffSeconds: config.completerBackoffSeconds,
          },
          accountResolver: accountOf,
        }),
        // GET /health: the store's health, through terminus.
        TerminusModule,
        IdempotencyHealthModule,
        ...brokers.map((broker) => broker.module),
        // `createCharge` at /graphql; its request is the GraphQL context's `req` on either platform.
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          context: (context: { req?: unknown; request?: unknown }) => ({ req: context.req ?? context.request }),
        }),
        IdempotencyGraphQLModule.forRoot({ keyArgument: 'idempotencyKey', required: true }),
      ],
      controllers: [
        ChargesController,
        RefundsController,
        PayoutsController,
        HealthController,
        PageController,
        OperatorController,
        ...(brokers.length > 0 ? [PayoutRequestsConsumer] : []),
      ],
      providers: [
        { provide: SAMPLE_CONFIG, useValue: config },
        paymentProvider
          ? { provide: PAYMENT_PROVIDER, useValue: paymentProvider }
          : { provide: PAYMENT_PROVIDER, useClass: FakePaymentProvider },
        ExternalLedger,
        { provide: RECEIPT_MAILER, useClass: FakeReceiptMailer },
        { provide: APP_GUARD, useClass: ApiKeyGuard },
        OperatorTokenGuard,
        ChargesService,
        ChargeCompletions,
        ChargesResolver,
        RefundsService,
        PayoutWorker,
      ],
    };
  }
}

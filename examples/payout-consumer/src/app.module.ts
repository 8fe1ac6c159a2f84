import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IdempotencyModule } from 'nest-idempotency';
import { idempotencyMigrations, IdempotencyPostgresModule } from 'nest-idempotency/postgres';
import { IdempotencyRabbitMQModule } from 'nest-idempotency/rabbitmq';
import type { PayoutRequest } from './payouts.consumer.js';
import { Payout } from './payout.entity.js';
import { PayoutsConsumer } from './payouts.consumer.js';

@Module({
  imports: [
    // Read when the application starts, not when this file is imported.
    TypeOrmModule.forRootAsync({
      useFactory: () => ({
        type: 'postgres',
        url: process.env.DATABASE_URL,
        entities: [Payout],
        migrations: idempotencyMigrations(),
        migrationsRun: true,
        // The example's own table; an application would ship a migration for it.
        synchronize: true,
      }),
    }),
    IdempotencyModule.forRoot({
      store: IdempotencyPostgresModule.forRoot(),
      // Keys are scoped by the payout's account, read from the message.
      accountResolver: (context) => context.switchToRpc().getData<PayoutRequest>().account,
      transactional: true,
    }),
    // Keys are the messages' AMQP messageId (the default).
    IdempotencyRabbitMQModule.forRoot(),
  ],
  controllers: [PayoutsConsumer],
})
export class AppModule {}

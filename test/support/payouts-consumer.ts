import { BadRequestException, Controller, Optional, type Type } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { DataSource } from 'typeorm';
import { Idempotent, IdempotencyContext } from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import type { Gate } from './gate.js';

/**
 * A payout message of the consumer specs: its `mode` says what its handler does (fail once, fail for good with an
 * `RpcException` or a `BadRequestException`, wait, or run a step `reserve` and fail once after it).
 */
export interface Payout {
  amount: number;
  mode?: 'fail-once' | 'final' | 'invalid' | 'gated' | 'stepped';
}

/** How many times each key's `reserve` step ran its work (`stepped` payouts). */
export const reserveRuns = new Map<string, number>();

/** The gates `gated` payouts wait at, by key: a test sets one before it publishes. */
export const gates = new Map<string, Gate>();

/**
 * The `PayoutsConsumer` controller of the consumer specs, on a broker's patterns: `@Idempotent()` handlers of an
 * event and of a request, each run writing one row in work_log (through the run's transaction when it has one) as
 * its payload's `mode` says. `onRun` sees each run first, with its key and the message's context.
 */
export function payoutsConsumer<Context>(
  patterns: { event: string; request: string },
  onRun: (key: string, context: Context) => void = () => undefined,
): Type<unknown> {
  const failedOnce = new Set<string>();

  @Controller()
  class PayoutsConsumer {
    constructor(
      private readonly dataSource: DataSource,
      private readonly idempotency: IdempotencyContext,
      // None with the records on Redis.
      @Optional() private readonly postgres?: PostgresIdempotencyContext,
    ) {}

    @Idempotent()
    @EventPattern<string>(patterns.event)
    async pay(@Payload() payout: Payout, @Ctx() context: Context): Promise<void> {
      await this.work(payout, context);
    }

    @Idempotent()
    @MessagePattern<string>(patterns.request)
    async quote(@Payload() payout: Payout, @Ctx() context: Context): Promise<{ quoted: number; run: number }> {
      return { quoted: payout.amount * 2, run: await this.work(payout, context) };
    }

    private async work(payout: Payout, context: Context): Promise<number> {
      const key = this.idempotency.run?.scope.key ?? 'unguarded';
      onRun(key, context);
      const manager = () => this.postgres?.manager ?? this.dataSource.manager;
      if (payout.mode === 'stepped') {
        // A step whose row is written on its own (standard mode) or in the run's transaction, then a failure.
        await this.idempotency.step('reserve', async () => {
          reserveRuns.set(key, (reserveRuns.get(key) ?? 0) + 1);
          await manager().query('INSERT INTO work_log (key) VALUES ($1)', [`${key}:reserve`]);
        });
      }
      if ((payout.mode === 'fail-once' || payout.mode === 'stepped') && !failedOnce.has(key)) {
        failedOnce.add(key);
        throw new Error('the payment provider timed out');
      }
      if (payout.mode === 'final') throw new RpcException({ reason: 'insufficient_funds' });
      // What a ValidationPipe throws for a payload it refuses.
      if (payout.mode === 'invalid') throw new BadRequestException('amount must be positive');
      if (payout.mode === 'gated') await gates.get(key)?.pass();
      const [{ id }] = await manager().query<Array<{ id: number }>>(
        'INSERT INTO work_log (key) VALUES ($1) RETURNING id',
        [key],
      );
      return id;
    }
  }
  return PayoutsConsumer;
}

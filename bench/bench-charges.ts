import { randomUUID } from 'node:crypto';
import { TypeOrmModule } from '@nestjs/typeorm';
import type { EntityManager, MigrationInterface, QueryRunner } from 'typeorm';
import { idempotencyMigrations } from '../src/postgres/index.js';

/** The charges table of the bench apps (ours in `bench-app.ts`, the peer's in `peer-app.ts`): one table, one insert. */
export class CreateBenchCharges1764633600002 implements MigrationInterface {
  name = 'CreateBenchCharges1764633600002';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      'CREATE TABLE bench_charges (id text PRIMARY KEY, amount integer NOT NULL, created timestamptz NOT NULL DEFAULT now())',
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE bench_charges');
  }
}

export interface ChargeBody {
  amount: number;
}

/** The charge insert that every bench route guards (or not, for the baseline). */
export async function insertCharge(manager: EntityManager, { amount }: ChargeBody) {
  const [charge] = await manager.query<{ id: string; amount: number }[]>(
    'INSERT INTO bench_charges (id, amount) VALUES ($1, $2) RETURNING id, amount',
    [`ch_${randomUUID()}`, amount],
  );
  return charge;
}

/**
 * The database of every bench app (ours and the peer's): `DATABASE_URL`, with the records table and the charges
 * table, whichever app starts first on it.
 */
export function benchDatabase() {
  return TypeOrmModule.forRootAsync({
    useFactory: () => ({
      type: 'postgres' as const,
      url: process.env.DATABASE_URL,
      migrations: [...idempotencyMigrations(), CreateBenchCharges1764633600002],
      migrationsRun: true,
      // Connections stay open while the app idles between its configurations (pg-pool closes idle ones after
      // 10 s by default), as they do in a service under steady load: reconnecting is not a per-request cost.
      // BENCH_POOL_SIZE: the bench gives every app the same pool, 20 where the server has the connections.
      extra: { max: Number(process.env.BENCH_POOL_SIZE ?? 20), idleTimeoutMillis: 0 },
    }),
  });
}

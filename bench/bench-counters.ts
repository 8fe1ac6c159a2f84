import { Controller, Get, Inject, Optional } from '@nestjs/common';
import { IDEMPOTENCY_STORE } from '../src/store/index.js';

/** What a bench app has spent so far, read before and after each row: per request, the numbers a row reports. */
export interface BenchCounters {
  /** The app process's CPU time (user and system), in microseconds. */
  cpuMicros: number;
  /** The statements its idempotency store has sent (each one round trip); null for an app without one that counts. */
  statements: number | null;
}

/** What counts an app's round trips to its store: `statementsSent`, the count so far. */
interface RoundTripCount {
  statementsSent?: number;
}

/**
 * An app's own count of its store's round trips, for a store that keeps none (the Redis store: the app counts the
 * commands sent on its client); without it, the store's own (the PostgreSQL store's `statementsSent`).
 */
export const BENCH_ROUND_TRIPS = Symbol('BENCH_ROUND_TRIPS');

/** `GET /bench/counters`: the app's counters, for the bench to read between its rows (never during one). */
@Controller('bench')
export class BenchCountersController {
  constructor(
    @Optional() @Inject(IDEMPOTENCY_STORE) private readonly store?: RoundTripCount,
    @Optional() @Inject(BENCH_ROUND_TRIPS) private readonly roundTrips?: RoundTripCount,
  ) {}

  @Get('counters')
  counters(): BenchCounters {
    const { user, system } = process.cpuUsage();
    return { cpuMicros: user + system, statements: (this.roundTrips ?? this.store)?.statementsSent ?? null };
  }
}

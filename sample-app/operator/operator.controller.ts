import { Body, Controller, Get, Param, Post, Query, UseGuards } from '@nestjs/common';
import { IdempotencyCompleter } from '../../src/index.js';
import { IdempotencyOperator, type OperatorRecord, type OperatorStateCounts } from '../../src/postgres/index.js';
import { invalidRequest } from '../api-errors.js';
import { Public } from '../auth/api-key.guard.js';
import { OperatorTokenGuard } from './operator-token.guard.js';

const LISTED_STATES = ['stuck', 'gave-up', 'running', 'completed', 'expired'] as const;
type ListedState = (typeof LISTED_STATES)[number];

/**
 * What the page's operator view reads and does, through the library's `IdempotencyOperator`: the records by state,
 * a key's records (attempt, steps' names, lease; never a body), the charges the completer gave up on, and a release
 * fenced on the attempt the operator was shown (which discards the steps). Behind the operator's token, not an API key (`OperatorTokenGuard`).
 */
@Controller('operator')
@Public()
@UseGuards(OperatorTokenGuard)
export class OperatorController {
  constructor(
    private readonly operator: IdempotencyOperator,
    private readonly completer: IdempotencyCompleter,
  ) {}

  @Get('records')
  async records(@Query('state') state = 'stuck'): Promise<{ counts: OperatorStateCounts; records: OperatorRecord[] }> {
    if (!(LISTED_STATES as readonly string[]).includes(state)) {
      throw invalidRequest(`state must be one of ${LISTED_STATES.join(', ')}`, 'state');
    }
    return { counts: await this.operator.countByState(), records: await this.recordsIn(state as ListedState) };
  }

  private async recordsIn(state: ListedState): Promise<OperatorRecord[]> {
    if (state === 'stuck') return this.operator.stuck({ limit: 50 });
    if (state !== 'gave-up') return this.operator.list(state, { limit: 50 });
    const gaveUp = await this.completer.gaveUp({ limit: 50 });
    const records = await Promise.all(gaveUp.map(({ scope }) => this.operator.inspect(scope)));
    return records.filter((record) => record !== undefined);
  }

  @Get('records/:key')
  async key(@Param('key') key: string): Promise<{ records: OperatorRecord[] }> {
    return { records: await this.operator.find({ key }, { limit: 50 }) };
  }

  @Post('release')
  release(@Body() body: Record<string, unknown>) {
    const fields = ['account', 'endpoint', 'key', 'attempt'] as const;
    for (const field of fields) {
      if (typeof body?.[field] !== 'string' || body[field] === '') throw invalidRequest(`${field} is required`, field);
    }
    const [account, endpoint, key, attempt] = fields.map((field) => body[field] as string);
    return this.operator.release({ account, endpoint, key }, attempt);
  }
}

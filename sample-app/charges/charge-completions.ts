import { HttpStatus, Injectable, type OnModuleInit } from '@nestjs/common';
import { IdempotencyCompleter } from '../../src/index.js';
import { routeCompletion } from '../../src/http/index.js';
import { presentCharge } from './charge.entity.js';
import { ChargesService } from './charges.service.js';

/**
 * Charges whose client went away mid-way (its process killed, its connection lost, and no retry came) are finished
 * by the completer, from their last step, as the client's retry would have: the card charged, its result recorded,
 * the receipt sent, and the answer stored for the retry that may still come (docs/steps.md).
 */
@Injectable()
export class ChargeCompletions implements OnModuleInit {
  constructor(
    private readonly completer: IdempotencyCompleter,
    private readonly charges: ChargesService,
  ) {}

  onModuleInit(): void {
    this.completer.register(
      'POST /v1/charges',
      routeCompletion(HttpStatus.CREATED, async ({ scope }) =>
        presentCharge(await this.charges.complete(scope.account)),
      ),
    );
  }
}

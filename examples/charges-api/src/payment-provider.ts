import { Injectable, ServiceUnavailableException } from '@nestjs/common';
import { randomUUID } from 'node:crypto';

export interface ProviderCharge {
  amount: number;
  currency: string;
  source?: string;
  /** Derived from the request's key: the same on every attempt, so that a repeated call is deduplicated. */
  idempotencyKey: string;
}

/**
 * A fake payment provider. It deduplicates calls by their idempotency key, as real ones do, and it can be told to
 * fail: `source: "tok_flaky"` fails the first call for a key (the provider was down), then succeeds.
 */
@Injectable()
export class PaymentProvider {
  private readonly charges = new Map<string, string>();
  private readonly failedOnce = new Set<string>();
  delayMs = 0;

  async charge(request: ProviderCharge): Promise<string> {
    if (this.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    if (request.source === 'tok_flaky' && !this.failedOnce.has(request.idempotencyKey)) {
      this.failedOnce.add(request.idempotencyKey);
      throw new ServiceUnavailableException('The payment provider is unavailable; retry the request.');
    }
    let id = this.charges.get(request.idempotencyKey);
    if (!id) {
      id = `py_${randomUUID()}`;
      this.charges.set(request.idempotencyKey, id);
    }
    return id;
  }

  /** How many distinct charges the provider made. */
  get chargeCount(): number {
    return this.charges.size;
  }
}

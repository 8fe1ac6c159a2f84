import { Injectable } from '@nestjs/common';
import { ExternalLedger } from './external-ledger.js';

export const RECEIPT_MAILER = Symbol('RECEIPT_MAILER');

export interface Receipt {
  account: string;
  chargeId: string;
  amount: number;
  currency: string;
  /** The mailer sends once per key, however often it is called with it. */
  idempotencyKey?: string;
}

/** Sends the receipt of a charge; returns the mailer's id of the message. */
export interface ReceiptMailer {
  send(receipt: Receipt): Promise<string>;
}

/** A fake mailer: each receipt it sends is a row of its own ledger (`mailer_receipts`), once per idempotency key. */
@Injectable()
export class FakeReceiptMailer implements ReceiptMailer {
  constructor(private readonly ledger: ExternalLedger) {}

  send({ account, chargeId, amount, currency, idempotencyKey }: Receipt): Promise<string> {
    return this.ledger.recordOnce('mailer_receipts', 'msg', idempotencyKey, {
      account,
      charge_id: chargeId,
      amount,
      currency,
    });
  }
}

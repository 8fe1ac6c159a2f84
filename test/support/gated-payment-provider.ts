import {
  CardDeclinedError,
  type PaymentProvider,
  type ProviderCharge,
  ProviderUnavailableError,
} from '../../sample-app/payment-provider.js';

/** A provider whose next charge waits until the test opens the gate; it declines and fails like the fake one. */
export class GatedPaymentProvider implements PaymentProvider {
  private gate?: { reached: () => void; opened: Promise<void> };
  charges = 0;

  /** Resolves when a charge reaches the provider; that charge waits for `open()`. */
  holdNextCharge(): { reached: Promise<void>; open: () => void } {
    let reached!: () => void;
    let open!: () => void;
    const reachedPromise = new Promise<void>((resolve) => (reached = resolve));
    this.gate = { reached, opened: new Promise<void>((resolve) => (open = resolve)) };
    return { reached: reachedPromise, open };
  }

  async charge({ source }: ProviderCharge): Promise<string> {
    const gate = this.gate;
    this.gate = undefined;
    if (gate) {
      gate.reached();
      await gate.opened;
    }
    if (source === 'tok_chargeDeclined') throw new CardDeclinedError('Your card was declined.');
    if (source === 'tok_providerDown') throw new ProviderUnavailableError('The payment provider is unavailable.');
    this.charges += 1;
    return `py_${this.charges}`;
  }

  async payout(): Promise<string> {
    throw new Error('this test makes no payouts');
  }
}

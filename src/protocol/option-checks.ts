import { describedValue } from './described-value.js';

// The checks every room's options go through at start-up, so that a wrong value is refused with one wording:
// the option's name, what it must be, and what it got.

export function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new RangeError(`Idempotency option ${name} must be a positive number, got ${describedValue(value)}`);
  }
  return value;
}

/** The longest delay Node.js keeps for a timer (2^31 - 1 ms); a longer one fires after 1 ms. */
export const LONGEST_TIMER_MS = 2 ** 31 - 1;

/** The same, in whole seconds. */
const LONGEST_TIMER_SECONDS = Math.floor(LONGEST_TIMER_MS / 1000);

/** How often a timer of the module's fires: positive, and at most about 24.8 days, which Node.js would cut to 1 ms. */
export function timerSeconds(name: string, value: number): number {
  if (positive(name, value) > LONGEST_TIMER_SECONDS) {
    throw new RangeError(
      `Idempotency option ${name} must be at most ${LONGEST_TIMER_SECONDS} s (Node.js runs a longer timer every ` +
        `millisecond), got ${describedValue(value)}`,
    );
  }
  return value;
}

/** A positive number no larger than `max`, which `why` explains. */
export function positiveAtMost(name: string, value: number, max: number, why: string): number {
  if (positive(name, value) > max) {
    throw new RangeError(`Idempotency option ${name} must be at most ${max} (${why}), got ${describedValue(value)}`);
  }
  return value;
}

export function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new RangeError(`Idempotency option ${name} must be a positive integer, got ${describedValue(value)}`);
  }
  return value;
}

export function wholeNumber(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`Idempotency option ${name} must be a whole number, got ${describedValue(value)}`);
  }
  return value;
}

export function oneOf<T extends string>(name: string, value: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(value)) {
    throw new RangeError(
      `Idempotency option ${name} must be one of ${allowed.join(', ')}, got ${describedValue(value)}`,
    );
  }
  return value as T;
}

/** A flag read from the environment is a string, and `"false"` is truthy: refused rather than taken for `true`. */
export function boolean(name: string, value: boolean): boolean {
  if (typeof value !== 'boolean')
    throw new TypeError(`Idempotency option ${name} must be true or false, got ${describedValue(value)}`);
  return value;
}

export function nonEmptyString(name: string, value: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(`Idempotency option ${name} must be a non-empty string, got ${describedValue(value)}`);
  }
  return value;
}

export function stringList(name: string, value: string[]): string[] {
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'string')) {
    throw new TypeError(`Idempotency option ${name} must be an array of strings, got ${describedValue(value)}`);
  }
  return value;
}

export function callable<F extends (...args: never[]) => unknown>(name: string, value: F): F {
  if (typeof value !== 'function')
    throw new TypeError(`Idempotency option ${name} must be a function, got ${describedValue(value)}`);
  return value;
}

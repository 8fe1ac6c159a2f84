import { Injectable, type PipeTransform } from '@nestjs/common';
import { invalidRequest } from './api-errors.js';

export interface ChargeInput {
  amount: number;
  currency: string;
  description: string | null;
  source: string | null;
}

export interface ChargeUpdate {
  description: string | null;
}

const MAX_TEXT = 1000;

/** Validates `POST /v1/charges` bodies, JSON or form-encoded (where numbers arrive as strings). */
@Injectable()
export class ChargeInputPipe implements PipeTransform<unknown, ChargeInput> {
  transform(body: unknown): ChargeInput {
    const fields = objectBody(body);
    const amount = integerField(fields.amount, 'amount');
    if (amount === undefined || amount <= 0)
      throw invalidRequest('amount must be a positive integer (in the smallest currency unit).', 'amount');
    const currency = fields.currency;
    if (typeof currency !== 'string' || !/^[a-z]{3}$/.test(currency)) {
      throw invalidRequest('currency must be a three-letter lowercase ISO code, e.g. "eur".', 'currency');
    }
    return {
      amount,
      currency,
      description: optionalText(fields.description, 'description'),
      source: optionalText(fields.source, 'source'),
    };
  }
}

/** Validates `PATCH /v1/charges/:id` bodies. */
@Injectable()
export class ChargeUpdatePipe implements PipeTransform<unknown, ChargeUpdate> {
  transform(body: unknown): ChargeUpdate {
    const fields = objectBody(body);
    if (!('description' in fields)) throw invalidRequest('description is required.', 'description');
    return { description: optionalText(fields.description, 'description') };
  }
}

export interface PayoutInput {
  amount: number;
  currency: string;
}

/** Validates `POST /v1/payouts` bodies. */
@Injectable()
export class PayoutInputPipe implements PipeTransform<unknown, PayoutInput> {
  transform(body: unknown): PayoutInput {
    const { amount, currency } = new ChargeInputPipe().transform(body);
    return { amount, currency };
  }
}

export interface RefundInput {
  charge: string;
  amount: number | undefined;
}

/** Validates `POST /v1/refunds` bodies. */
@Injectable()
export class RefundInputPipe implements PipeTransform<unknown, RefundInput> {
  transform(body: unknown): RefundInput {
    const fields = objectBody(body);
    if (typeof fields.charge !== 'string' || fields.charge.length === 0)
      throw invalidRequest('charge must be a charge id.', 'charge');
    const amount = integerField(fields.amount, 'amount');
    if (amount !== undefined && amount <= 0) throw invalidRequest('amount must be a positive integer.', 'amount');
    return { charge: fields.charge, amount };
  }
}

/** Parses `?limit=` of list endpoints: 1..100, default 10. */
@Injectable()
export class ListLimitPipe implements PipeTransform<unknown, number> {
  transform(value: unknown): number {
    if (value === undefined) return 10;
    const limit = integerField(value, 'limit');
    if (limit === undefined || limit < 1 || limit > 100)
      throw invalidRequest('limit must be an integer from 1 to 100.', 'limit');
    return limit;
  }
}

function objectBody(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw invalidRequest('The request body must be an object.');
  return body as Record<string, unknown>;
}

function integerField(value: unknown, name: string): number | undefined {
  if (value === undefined) return undefined;
  const number = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value;
  if (typeof number !== 'number' || !Number.isSafeInteger(number))
    throw invalidRequest(`${name} must be an integer.`, name);
  return number;
}

function optionalText(value: unknown, name: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value.length > MAX_TEXT)
    throw invalidRequest(`${name} must be a string of at most ${MAX_TEXT} characters.`, name);
  return value;
}

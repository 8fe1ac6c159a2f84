import { applyDecorators } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { ApiHeader, ApiResponse, type ExampleObject } from '@nestjs/swagger';
import { refusalAnswer } from '../http/http-answers.js';
import type { HttpIdempotentOptions } from '../http/http-options.interface.js';
import { type HttpRoutePolicy, resolveHttpPolicy } from '../http/http-policy.js';
import type { IdempotencyErrorCode } from '../protocol/idempotency.errors.js';
import { IDEMPOTENT_METADATA } from '../protocol/idempotency.tokens.js';
import type { ApiIdempotentOptions } from './api-idempotent-options.interface.js';
import { exampleRefusals } from './example-refusals.js';
import { refusalSchemaOf } from './refusal-schemas.js';

const reflector = new Reflector();

/**
 * Documents an idempotent route (or every route of a controller) for `@nestjs/swagger`: the key's request header, the
 * replay header of a success, and the refusals the module may answer, grouped by status, with the body schema and
 * content type of `options.profile`. It documents only: `@Idempotent()` is what makes the route idempotent. Written
 * above an `@Idempotent()`, it reads that one's `required`.
 */
export function ApiIdempotent(options: ApiIdempotentOptions = {}): ClassDecorator & MethodDecorator {
  const decorate = (target: object, key?: string | symbol, descriptor?: PropertyDescriptor) => {
    const decorated = (descriptor?.value ?? target) as (...args: unknown[]) => unknown;
    const routeOptions = reflector.get<HttpIdempotentOptions | undefined>(IDEMPOTENT_METADATA, decorated);
    const policy = resolveHttpPolicy(options, routeOptions);
    const decorators = [
      ApiHeader({
        name: policy.headerName,
        required: policy.required,
        description:
          'A unique key per operation (1 to 255 visible ASCII characters), sent again on every retry of it: a retry ' +
          'is answered the first attempt’s response instead of running again.',
        schema: { type: 'string', minLength: 1, maxLength: 255 },
      }),
      ApiResponse({
        status: '2XX',
        description: `The response; a retry with the same key gets the stored one, with ${policy.replayHeaderName}: true.`,
        headers: {
          [policy.replayHeaderName]: {
            description: 'Present on a replayed response.',
            schema: { type: 'string', enum: ['true'] },
          },
        },
      }),
      ...refusalResponses(policy),
    ];
    applyDecorators(...decorators)(target, key, descriptor);
  };
  return decorate;
}

/** One documented response per status the profile answers refusals with, every code of that status listed. */
function refusalResponses(policy: HttpRoutePolicy) {
  const byStatus = new Map<
    number,
    { codes: IdempotencyErrorCode[]; contentType: string; examples: Record<string, ExampleObject> }
  >();
  for (const error of exampleRefusals(policy.headerName, policy.required)) {
    const answer = refusalAnswer(error, policy.profile);
    const entry = byStatus.get(answer.status) ?? {
      codes: [],
      contentType: answer.headers['content-type'] ?? 'application/json',
      examples: {},
    };
    entry.codes.push(error.code);
    entry.examples[error.code] = { summary: error.code, value: answer.body };
    byStatus.set(answer.status, entry);
  }
  return [...byStatus].map(([status, { codes, contentType, examples }]) => {
    const retryAfter = codes.some((code) => RETRIED_CODES.has(code));
    return ApiResponse({
      status,
      description: `Refused by the idempotency module: ${codes.join(', ')}.`,
      content: { [contentType]: { schema: refusalSchemaOf(policy.profile.name, codes), examples } },
      ...(retryAfter
        ? {
            headers: {
              'Retry-After': {
                description: 'Seconds to wait before retrying with the same key.',
                schema: { type: 'integer' },
              },
            },
          }
        : {}),
    });
  });
}

/** The refusals answered with `Retry-After`. */
const RETRIED_CODES: ReadonlySet<IdempotencyErrorCode> = new Set([
  'request_in_progress',
  'idempotency_store_unavailable',
  'idempotency_shutting_down',
]);

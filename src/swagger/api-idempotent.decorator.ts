import { applyDecorators, RequestMethod, type Type } from '@nestjs/common';
import { METHOD_METADATA } from '@nestjs/common/constants.js';
import { Reflector } from '@nestjs/core';
import { ApiHeader, ApiResponse, type ExampleObject } from '@nestjs/swagger';
import { refusalAnswer } from '../http/answers/http-answers.js';
import type { HttpIdempotentOptions } from '../http/http-options.interface.js';
import { type HttpRoutePolicy, resolveHttpPolicy } from '../http/requests/http-policy.js';
import { PASS_THROUGH_METHODS } from '../http/http.constants.js';
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
  resolveHttpPolicy(options); // a wrong option refuses where it is written, on a class without routes too
  const decorate = (target: object, key?: string | symbol, descriptor?: PropertyDescriptor) => {
    if (descriptor) documentRoute(options, optionsOf(descriptor.value as object), target, key, descriptor);
    else documentRoutesOf(target as Type, options);
  };
  return decorate;
}

/**
 * On a class: each of its routes that claims keys, by its own `@Idempotent()` over the class's (as the module reads
 * them at run time); the routes that pass through (`GET`, `HEAD`, `OPTIONS`, `DELETE`) are left alone. The class's
 * decorators have run by then, its methods' too.
 */
function documentRoutesOf(controller: Type, options: ApiIdempotentOptions): void {
  const classOptions = optionsOf(controller);
  for (const [name, descriptor] of routesOf(controller)) {
    const method = Reflect.getMetadata(METHOD_METADATA, descriptor.value as object) as RequestMethod;
    if (PASS_THROUGH_METHODS.has(RequestMethod[method])) continue;
    const routeOptions = { ...classOptions, ...optionsOf(descriptor.value as object) };
    documentRoute(options, routeOptions, controller.prototype as object, name, descriptor);
  }
}

/** The class's route handlers (its own, then those it inherits and does not override), by method name. */
function routesOf(controller: Type): Map<string, PropertyDescriptor> {
  const routes = new Map<string, PropertyDescriptor>();
  for (
    let proto = controller.prototype as object | null;
    proto && proto !== Object.prototype;
    proto = Object.getPrototypeOf(proto) as object | null
  ) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      const isRoute =
        typeof descriptor?.value === 'function' &&
        Reflect.getMetadata(METHOD_METADATA, descriptor.value as object) !== undefined;
      if (isRoute && !routes.has(name)) routes.set(name, descriptor);
    }
  }
  return routes;
}

function optionsOf(decorated: object): HttpIdempotentOptions | undefined {
  return reflector.get<HttpIdempotentOptions | undefined>(IDEMPOTENT_METADATA, decorated as Type);
}

/** The key's header, the replay header of a success, and the refusals, on one route. */
function documentRoute(
  options: ApiIdempotentOptions,
  routeOptions: HttpIdempotentOptions | undefined,
  target: object,
  key: string | symbol | undefined,
  descriptor: PropertyDescriptor,
): void {
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

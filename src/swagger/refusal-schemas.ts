import type { SchemaObject } from '@nestjs/swagger';
import type { HttpProfileName } from '../http/answers/http-profile.js';
import type { IdempotencyErrorCode } from '../protocol/idempotency.errors.js';

/** The body of a refusal in each profile, its code's values being the ones of the answer it describes. */
export function refusalSchemaOf(profile: HttpProfileName, codes: IdempotencyErrorCode[]): SchemaObject {
  const code: SchemaObject = { type: 'string', enum: codes, description: 'The refusal’s stable code.' };
  const text: SchemaObject = { type: 'string' };
  switch (profile) {
    case 'stripe':
      return {
        type: 'object',
        required: ['error'],
        properties: {
          error: {
            type: 'object',
            required: ['type', 'code', 'message'],
            properties: {
              type: { type: 'string', enum: ['invalid_request_error', 'idempotency_error', 'api_error'] },
              code,
              message: text,
            },
          },
        },
      };
    case 'ietf':
      return {
        type: 'object',
        description: 'RFC 9457 problem details.',
        required: ['type', 'title', 'status', 'detail', 'code'],
        properties: {
          type: { type: 'string', format: 'uri' },
          title: text,
          status: { type: 'integer' },
          detail: text,
          code,
        },
      };
    default:
      return {
        type: 'object',
        required: ['statusCode', 'error', 'message'],
        properties: { statusCode: { type: 'integer' }, error: code, message: text },
      };
  }
}

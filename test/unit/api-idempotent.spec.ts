import { Controller, Get, type INestApplication, Patch, Post, Put } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { ApiCreatedResponse, DocumentBuilder, type OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import { Idempotent } from '../../src/index.js';
import { ApiIdempotent } from '../../src/swagger/index.js';

@Controller('v1/charges')
class ChargesController {
  @Post()
  @ApiIdempotent({ profile: 'stripe', headerName: 'X-Request-Key' })
  @Idempotent()
  create() {
    return {};
  }

  @Patch(':id')
  @ApiIdempotent({ profile: 'stripe' })
  @Idempotent({ required: false })
  update() {
    return {};
  }
}

@Controller('v1/refunds')
@ApiIdempotent()
@Idempotent()
class RefundsController {
  @Post()
  @ApiCreatedResponse({ description: 'The refund.' })
  create() {
    return {};
  }

  @Put(':id')
  @Idempotent({ required: false })
  replace() {
    return {};
  }

  @Get()
  list() {
    return [];
  }
}

let app: INestApplication;
let document: OpenAPIObject;

beforeAll(async () => {
  const module = await Test.createTestingModule({ controllers: [ChargesController, RefundsController] }).compile();
  app = module.createNestApplication({ logger: false });
  document = SwaggerModule.createDocument(app, new DocumentBuilder().build());
});

afterAll(async () => {
  await app?.close();
});

describe('@ApiIdempotent()', () => {
  it('documents the key header by its options, and the stripe profile’s replay header', () => {
    const create = document.paths['/v1/charges'].post!;
    expect(create.parameters).toContainEqual(
      expect.objectContaining({ name: 'X-Request-Key', in: 'header', required: true }),
    );
    expect(create.responses['2XX']).toMatchObject({ headers: { 'Idempotent-Replayed': expect.any(Object) } });
  });

  it('documents the stripe profile’s statuses and bodies: a reused key is 400 idempotency_error', () => {
    const { responses } = document.paths['/v1/charges'].post!;
    expect(Object.keys(responses).sort()).toEqual(['2XX', '400', '409', '500', '503']);
    const badRequest = responses['400'] as { content: Record<string, { schema: object; examples: object }> };
    expect(badRequest.content['application/json'].schema).toMatchObject({
      properties: {
        error: {
          properties: {
            code: {
              enum: [
                'idempotency_key_required',
                'idempotency_key_invalid',
                'idempotency_body_unsupported',
                'idempotency_key_reuse',
              ],
            },
          },
        },
      },
    });
    expect(badRequest.content['application/json'].examples).toMatchObject({
      idempotency_key_reuse: { value: { error: { type: 'idempotency_error', code: 'idempotency_key_reuse' } } },
    });
  });

  it('reads required from the @Idempotent() written below it', () => {
    const update = document.paths['/v1/charges/{id}'].patch!;
    expect(update.parameters).toContainEqual(
      expect.objectContaining({ name: 'Idempotency-Key', in: 'header', required: false }),
    );
  });

  it('keeps a success response the route declares beside its 2XX (swagger drops its default 201 for them)', () => {
    const { responses } = document.paths['/v1/refunds'].post!;
    expect(responses['201']).toMatchObject({ description: 'The refund.' });
    expect(responses['2XX']).toMatchObject({ headers: { 'Idempotent-Replay': expect.any(Object) } });
    expect(document.paths['/v1/charges'].post!.responses['201']).toBeUndefined();
  });

  it('on a class, documents each route by its own @Idempotent() and leaves the routes that pass through', () => {
    expect(document.paths['/v1/refunds/{id}'].put!.parameters).toContainEqual(
      expect.objectContaining({ name: 'Idempotency-Key', in: 'header', required: false }),
    );
    expect(document.paths['/v1/refunds'].get!.parameters ?? []).not.toContainEqual(
      expect.objectContaining({ name: 'Idempotency-Key' }),
    );
  });

  it('refuses an unknown profile where it is written', () => {
    expect(() => ApiIdempotent({ profile: 'graphql' as 'ietf' })(class {})).toThrow(
      'Idempotency option profile must be one of default, stripe, ietf, got the string "graphql"',
    );
  });
});

import { IdempotencyKeyInvalidError } from '../../src/index.js';
import { httpBodyOf, httpStatusOf } from '../../src/http/answers/http-answers.js';
import { parseIdempotencyKey } from '../../src/transport-kit/key-header.js';

const parse = (value: string | string[] | undefined) => parseIdempotencyKey(value, 'Idempotency-Key');

describe('parseIdempotencyKey', () => {
  it('returns undefined when the header is absent', () => {
    expect(parse(undefined)).toBeUndefined();
  });

  it.each([
    ['a bare token', 'f81d4fae-7dec-11d0-a765-00a0c91e6bf6', 'f81d4fae-7dec-11d0-a765-00a0c91e6bf6'],
    ['a one-character key', 'k', 'k'],
    ['every visible ASCII character', '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~', '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'],
    ['an RFC 8941 string', '"abc"', 'abc'],
    ['an RFC 8941 string with escapes', '"a\\"b\\\\c"', 'a"b\\c'],
    ['a 255-character key', 'x'.repeat(255), 'x'.repeat(255)],
    ['a quoted 255-character key', `"${'x'.repeat(255)}"`, 'x'.repeat(255)],
  ])('accepts %s', (_case, header, key) => {
    expect(parse(header)).toBe(key);
  });

  it.each([
    ['an empty value', '', 'it is empty'],
    ['an empty quoted string', '""', 'it is empty'],
    ['a 256-character key', 'x'.repeat(256), 'longer than 255'],
    ['a space', 'a b', 'visible ASCII'],
    ['a quoted space', '"a b"', 'visible ASCII'],
    ['a tab', 'a\tb', 'visible ASCII'],
    ['a non-ASCII character', 'clé', 'visible ASCII'],
    ['an unknown escape', '"a\\nb"', 'may only escape'],
    ['a dangling escape', '"ab\\', 'may only escape'],
    ['an unclosed quote', '"abc', 'never closed'],
    ['characters after the closing quote', '"abc"d', 'after the closing quote'],
    ['a header sent twice', ['a', 'b'], 'more than once'],
    // Node.js joins a header sent twice into one value, `a, b`, on Express and on Fastify alike.
    ['a header sent twice, as Node.js joins it', 'a, b', 'it was sent more than once'],
    ['a header sent twice with quoted keys, as Node.js joins it', '"a", "b"', 'it was sent more than once'],
    ['a header sent empty, then again, as Node.js joins it', ', b', 'it was sent more than once'],
  ])('refuses %s with 400 idempotency_key_invalid', (_case, header, reason) => {
    let error: unknown;
    try {
      parse(header);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(IdempotencyKeyInvalidError);
    const invalid = error as IdempotencyKeyInvalidError;
    expect(httpStatusOf(invalid)).toBe(400);
    expect(httpBodyOf(invalid)).toMatchObject({
      statusCode: 400,
      error: 'idempotency_key_invalid',
      message: expect.stringContaining(reason),
    });
  });
});

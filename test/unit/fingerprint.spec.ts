import { createHash } from 'node:crypto';
import { sha256Fingerprint } from '../../src/index.js';

const input = {
  method: 'POST',
  url: '/v1/charges?expand=source',
  contentType: 'application/json',
  body: Buffer.from('{"amount":1200}'),
};

describe('sha256Fingerprint', () => {
  it('is the hex sha256 of method, path with query, content type and raw body', () => {
    const expected = createHash('sha256')
      .update('POST /v1/charges?expand=source\napplication/json\n{"amount":1200}')
      .digest('hex');
    expect(sha256Fingerprint(input)).toBe(expected);
  });

  it('is stable for the same request', () => {
    expect(sha256Fingerprint({ ...input, body: Buffer.from(input.body) })).toBe(sha256Fingerprint(input));
  });

  it.each([
    ['the method', { method: 'PATCH' }],
    ['the path', { url: '/v1/charges/ch_2?expand=source' }],
    ['the query', { url: '/v1/charges?expand=customer' }],
    ['the body', { body: Buffer.from('{"amount":1300}') }],
    ['the body formatting (bytes, not parsed values)', { body: Buffer.from('{ "amount": 1200 }') }],
    ['the content type (the same bytes as form data)', { contentType: 'application/x-www-form-urlencoded' }],
    ['an absent content type', { contentType: '' }],
  ])('changes with %s', (_case, change) => {
    expect(sha256Fingerprint({ ...input, ...change })).not.toBe(sha256Fingerprint(input));
  });

  it('cannot be forged by moving bytes between the target and the body', () => {
    const a = sha256Fingerprint({ method: 'POST', url: '/a', contentType: '', body: Buffer.from('b') });
    const b = sha256Fingerprint({ method: 'POST', url: '/ab', contentType: '', body: Buffer.alloc(0) });
    expect(a).not.toBe(b);
  });
});

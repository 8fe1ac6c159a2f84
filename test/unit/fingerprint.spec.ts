import { createHash } from 'node:crypto';
import {
  type FingerprintInput,
  jsonFieldsFingerprint,
  type JsonFieldsSelection,
  sha256Fingerprint,
} from '../../src/http/index.js';
import { resolveHttpPolicy } from '../../src/http/requests/http-policy.js';

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

describe('jsonFieldsFingerprint', () => {
  const order = {
    amount: 1200,
    currency: 'eur',
    customer: { id: 'cus_1', email: 'a@example.com' },
    metadata: { requestedAt: '2026-01-01T10:00:00Z', orderId: 'o-42', tags: ['a', 'b'] },
    traceId: 't-1',
  };
  const jsonRequest = (body: unknown, change: Partial<FingerprintInput> = {}): FingerprintInput => ({
    method: 'POST',
    url: '/v1/orders?expand=items',
    contentType: 'application/json',
    body: Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)),
    ...change,
  });
  const excluding = jsonFieldsFingerprint({ exclude: ['metadata.requestedAt', 'traceId'] });
  const including = jsonFieldsFingerprint({ include: ['amount', 'currency', 'customer.id'] });

  describe.each([
    ['exclude', excluding],
    ['include', including],
  ])('with %s', (_mode, fingerprint) => {
    it('is a hex sha256, other than the raw-bytes one', () => {
      expect(fingerprint(jsonRequest(order))).toMatch(/^[0-9a-f]{64}$/);
      expect(fingerprint(jsonRequest(order))).not.toBe(sha256Fingerprint(jsonRequest(order)));
    });

    it('ignores key order and formatting at every depth', () => {
      const reordered = `{ "traceId": "t-1", "metadata": { "tags": ["a","b"], "orderId": "o-42",
        "requestedAt": "2026-01-01T10:00:00Z" }, "customer": { "email": "a@example.com", "id": "cus_1" },
        "currency": "eur", "amount": 1200.0 }`;
      expect(fingerprint(jsonRequest(reordered))).toBe(fingerprint(jsonRequest(order)));
    });

    it.each([
      ['the method', { method: 'PUT' }],
      ['the path', { url: '/v2/orders?expand=items' }],
      ['the query', { url: '/v1/orders?expand=customer' }],
      ['the content type', { contentType: 'application/merge-patch+json' }],
    ])('changes with %s, whatever the body', (_case, change) => {
      expect(fingerprint(jsonRequest(order, change))).not.toBe(fingerprint(jsonRequest(order)));
    });

    it.each([
      ['the amount', { ...order, amount: 1300 }],
      ['a nested included field', { ...order, customer: { ...order.customer, id: 'cus_2' } }],
      ['a compared field removed', { currency: 'eur', customer: order.customer, metadata: order.metadata }],
      ['a compared field set to null instead of absent', { ...order, customer: { ...order.customer, id: null } }],
      ['the type of a compared field', { ...order, amount: '1200' }],
    ])('changes with %s', (_case, body) => {
      expect(fingerprint(jsonRequest(body))).not.toBe(fingerprint(jsonRequest(order)));
    });

    it('tells 1e400, -1e400 and null apart, as the handler does (JSON.parse gives Infinity, -Infinity, null)', () => {
      const withAmount = (amount: string, id = '"cus_1"') =>
        fingerprint(jsonRequest(`{"amount":${amount},"currency":"eur","customer":{"id":${id}}}`));
      const fingerprints = [withAmount('1e400'), withAmount('-1e400'), withAmount('null')];
      expect(new Set(fingerprints).size).toBe(3);
      expect(withAmount('2e400')).toBe(withAmount('1e400')); // both parse to Infinity
      // Which null was a number too large, not only how many.
      expect(withAmount('1e400', 'null')).not.toBe(withAmount('null', '1e400'));
    });

    it.each([
      ['a form', 'application/x-www-form-urlencoded', 'amount=1200&currency=eur'],
      ['no body', 'application/json', ''],
      ['bytes that do not parse', 'application/json', '{"amount":'],
      ['another charset', 'application/json;charset=iso-8859-1', '{"amount":1200}'],
      ['text', 'text/plain', '{"amount":1200}'],
    ])('falls back to the raw-bytes fingerprint for %s', (_case, contentType, body) => {
      const input = jsonRequest(body, { contentType });
      expect(fingerprint(input)).toBe(sha256Fingerprint(input));
    });
  });

  it('with exclude, ignores the excluded fields, and only them', () => {
    const retried = { ...order, traceId: 't-2', metadata: { ...order.metadata, requestedAt: '2026-01-01T10:00:05Z' } };
    expect(excluding(jsonRequest(retried))).toBe(excluding(jsonRequest(order)));
    const { traceId: _dropped, ...withoutTrace } = order;
    expect(excluding(jsonRequest(withoutTrace))).toBe(excluding(jsonRequest(order)));
    const utf8 = { contentType: 'application/json;charset=utf-8' };
    expect(excluding(jsonRequest(retried, utf8))).toBe(excluding(jsonRequest(order, utf8)));
    const otherOrder = { ...order, metadata: { ...order.metadata, orderId: 'o-43' } };
    expect(excluding(jsonRequest(otherOrder))).not.toBe(excluding(jsonRequest(order)));
    expect(excluding(jsonRequest({ ...order, note: 'new field' }))).not.toBe(excluding(jsonRequest(order)));
  });

  it('with include, ignores every other field', () => {
    const other = { ...order, traceId: 't-2', metadata: {}, customer: { id: 'cus_1' }, extra: true };
    expect(including(jsonRequest(other))).toBe(including(jsonRequest(order)));
  });

  it('stops a path at a value that is not an object, which then counts whole', () => {
    const tags = jsonFieldsFingerprint({ exclude: ['metadata.tags.0', 'customer.id.x'] });
    const changed = { ...order, metadata: { ...order.metadata, tags: ['z', 'b'] }, customer: { id: 'cus_2' } };
    expect(tags(jsonRequest(changed))).not.toBe(tags(jsonRequest(order)));
    const itemsOnly = jsonFieldsFingerprint({ include: ['items.price'] });
    expect(itemsOnly(jsonRequest({ items: [{ price: 1 }] }))).not.toBe(
      itemsOnly(jsonRequest({ items: [{ price: 2 }] })),
    );
    expect(itemsOnly(jsonRequest([1, 2]))).not.toBe(itemsOnly(jsonRequest([1, 3])));
    expect(itemsOnly(jsonRequest({ items: null }))).not.toBe(itemsOnly(jsonRequest({})));
  });

  it('takes a shorter path as covering the longer ones under it', () => {
    const fingerprint = jsonFieldsFingerprint({ exclude: ['metadata.requestedAt', 'metadata'] });
    expect(fingerprint(jsonRequest({ ...order, metadata: { orderId: 'other' } }))).toBe(
      fingerprint(jsonRequest(order)),
    );
  });

  it('treats a "__proto__" key as a field like any other', () => {
    const fingerprint = jsonFieldsFingerprint({ include: ['__proto__.amount'] });
    const a = fingerprint(jsonRequest('{"__proto__":{"amount":1}}'));
    expect(a).not.toBe(fingerprint(jsonRequest('{"__proto__":{"amount":2}}')));
    expect(a).not.toBe(fingerprint(jsonRequest('{}')));
  });

  it.each([
    ['both lists', { include: ['a'], exclude: ['b'] }, RangeError, /exactly one of include or exclude, got both/],
    ['neither list', {}, RangeError, /exactly one of include or exclude, got neither/],
    ['no selection', undefined, TypeError, /takes \{ include \} or \{ exclude \}, got undefined/],
    ['an empty list', { exclude: [] }, RangeError, /exclude must list at least one field, got an empty array/],
    [
      'a string for a list',
      { include: 'amount' },
      TypeError,
      /include must be an array of dotted paths, got the string "amount"/,
    ],
    [
      'a path that is not a string',
      { exclude: ['a', 3] },
      TypeError,
      /exclude\[1\] must be a dotted path, got the number 3/,
    ],
    [
      'an empty path',
      { include: [''] },
      RangeError,
      /include\[0\] must be object keys joined by dots, none empty, got the string ""/,
    ],
    ['an empty key', { exclude: ['metadata..at'] }, RangeError, /none empty, got the string "metadata..at"/],
    ['a wildcard', { exclude: ['items.*.at'] }, RangeError, /must not hold a wildcard.*got the string "items.\*.at"/],
  ])('refuses %s at once', (_case, selection, type, message) => {
    const make = () => jsonFieldsFingerprint(selection as unknown as JsonFieldsSelection);
    expect(make).toThrow(type);
    expect(make).toThrow(message);
    expect(make).toThrow(/^Idempotency option fingerprint: jsonFieldsFingerprint\(\)/);
  });

  // Fingerprints are stored with records: a version that computed others would refuse every retry across the upgrade.
  it.each([
    [
      '{"amount":1200,"currency":"eur","traceId":"t-1"}',
      '692d76348a46a40a22c615eac4df43fe08dc3c76a17f876818deac4f3db7c33d',
      'd6884119763c130fa62bd95492edb03e3a36d22c24826c1f9e115f96e69b5a2a',
    ],
    [
      '{"b":[1,2.5,-3e-7,{"z":null,"a":true}],"10":"x","9":false,"é":"ü\\u0000","":{}}',
      'c7ea62cd7309643b72c66bb4f74edb655a0eb924ecbc8ab27ccdd4dd63018359',
      '7a423e3b89cc31dfa021fa9cdeaa120a1ba3bdd251f32f1ba01266ab0debbf1c',
    ],
    [
      '[null,"Infinity",12345678901234567890]',
      'a564b3955d012222957f59c09194d62467846fcca9a290565779252ef376d11b',
      'a564b3955d012222957f59c09194d62467846fcca9a290565779252ef376d11b',
    ],
    [
      '{"amount":1200,"customer":{"id":"cus_1","name":"Ada"}}',
      '5cf8b49733df23a311882c69d126feebc53febd482f4adcc3f40d276507c0154',
      'b59160ff132829c8f674149e88a01783d2224e645bd93fbe548285865f59c541',
    ],
  ])('keeps the fingerprint of earlier versions for %s', (body, excludingTraceId, includingAmountAndCustomerId) => {
    const request = { method: 'POST', url: '/v1/orders?expand=items', contentType: 'application/json' };
    const input = { ...request, body: Buffer.from(body) };
    expect(jsonFieldsFingerprint({ exclude: ['traceId'] })(input)).toBe(excludingTraceId);
    expect(jsonFieldsFingerprint({ include: ['amount', 'customer.id'] })(input)).toBe(includingAmountAndCustomerId);
  });

  it('plugs into the fingerprint option of a route', () => {
    expect(resolveHttpPolicy({}, { fingerprint: excluding }).fingerprint).toBe(excluding);
  });
});

import * as zlib from 'node:zlib';
import {
  acceptsCodings,
  contentCodingsOf,
  decodeBody,
  responseForClient,
  unstorableCoding,
} from '../../src/http/capture/content-coding.js';

const BODY = Buffer.from(JSON.stringify({ id: 'ch_1', padding: 'x'.repeat(2000) }));

describe('contentCodingsOf', () => {
  it('lists the codings in the order they were applied, lower-case, x-gzip as gzip, without identity', () => {
    expect(contentCodingsOf(undefined)).toEqual([]);
    expect(contentCodingsOf('identity')).toEqual([]);
    expect(contentCodingsOf('GZIP')).toEqual(['gzip']);
    expect(contentCodingsOf('x-gzip')).toEqual(['gzip']);
    expect(contentCodingsOf('deflate, br')).toEqual(['deflate', 'br']);
    expect(contentCodingsOf(['gzip', 'br'])).toEqual(['gzip', 'br']);
  });
});

describe('acceptsCodings', () => {
  it.each([
    ['gzip', true],
    ['GZip', true],
    ['deflate, gzip', true],
    ['gzip;q=0.5', true],
    ['gzip; q=0.001', true],
    ['x-gzip', true],
    ['*', true],
    ['br, *;q=0.1', true],
    ['gzip;q=0', false],
    ['gzip;q=0.000', false],
    ['*;q=0', false],
    ['gzip;q=0, *', false],
    ['identity', false],
    ['identity, *;q=0', false],
    ['br, deflate', false],
    ['', false],
    // A weight RFC 9110 does not allow counts as 0: in doubt, the client gets identity, which any client reads.
    ['gzip;q=high', false],
    ['gzip;q=1.5', false],
    // Listed twice, a coding counts with its lower weight.
    ['gzip, x-gzip;q=0', false],
  ])('Accept-Encoding: %p accepts gzip: %p', (acceptEncoding, accepted) => {
    expect(acceptsCodings(acceptEncoding, ['gzip'])).toBe(accepted);
  });

  it('accepts identity only without the header, as compression middlewares assume', () => {
    expect(acceptsCodings(undefined, ['gzip'])).toBe(false);
  });

  it('accepts a list of codings only when it accepts each one', () => {
    expect(acceptsCodings('gzip, br', ['gzip', 'br'])).toBe(true);
    expect(acceptsCodings('gzip', ['gzip', 'br'])).toBe(false);
  });
});

describe('decodeBody', () => {
  it.each([
    ['gzip', zlib.gzipSync(BODY)],
    ['deflate', zlib.deflateSync(BODY)],
    ['br', zlib.brotliCompressSync(BODY)],
  ])('undoes %s', (coding, coded) => {
    expect(decodeBody(coded, [coding], 1 << 20)).toEqual(BODY);
  });

  it('undoes a list of codings in reverse order', () => {
    expect(decodeBody(zlib.brotliCompressSync(zlib.gzipSync(BODY)), ['gzip', 'br'], 1 << 20)).toEqual(BODY);
  });

  it('stops at maxBytes', () => {
    expect(() => decodeBody(zlib.gzipSync(BODY), ['gzip'], BODY.length - 1)).toThrow(
      expect.objectContaining({ code: 'ERR_BUFFER_TOO_LARGE' }),
    );
  });
});

describe('unstorableCoding', () => {
  it('stores a body that decodes within maxBytes', () => {
    expect(unstorableCoding(zlib.gzipSync(BODY), ['gzip'], BODY.length)).toBeUndefined();
  });

  it('refuses a coding the module cannot decode, naming it', () => {
    expect(unstorableCoding(BODY, ['compress'], 1 << 20)).toBe(
      'its Content-Encoding is compress, which the module cannot decode for a client that does not accept it',
    );
  });

  // zstd is Node.js's from 22.15 on (and @fastify/compress's first choice there); on Node.js 20 it is not stored.
  const zstdCompressSync = (zlib as { zstdCompressSync?: (body: Buffer) => Buffer }).zstdCompressSync;
  if (zstdCompressSync) {
    it('stores zstd where Node.js decodes it', () => {
      expect(unstorableCoding(zstdCompressSync(BODY), ['zstd'], 1 << 20)).toBeUndefined();
    });
  } else {
    it('refuses zstd where Node.js does not decode it', () => {
      expect(unstorableCoding(BODY, ['zstd'], 1 << 20)).toBe(
        'its Content-Encoding is zstd, which the module cannot decode for a client that does not accept it',
      );
    });
  }

  it('refuses a small body that inflates past maxBytes', () => {
    const bomb = zlib.gzipSync(Buffer.alloc(4 << 20));
    expect(bomb.length).toBeLessThan(8192);
    expect(unstorableCoding(bomb, ['gzip'], 1 << 20)).toBe('decoded, the response body is larger than 1048576 bytes');
  });

  it('refuses a body that does not decode (raw deflate, which some servers send as deflate)', () => {
    expect(unstorableCoding(zlib.deflateRawSync(BODY), ['deflate'], 1 << 20)).toBe('its deflate body does not decode');
  });
});

describe('responseForClient', () => {
  const stored = {
    status: 201,
    headers: { 'content-type': 'application/json', 'content-encoding': 'gzip', vary: 'accept-encoding' },
    body: zlib.gzipSync(BODY),
  };

  it('is the stored response for a client that accepts its coding', () => {
    expect(responseForClient(stored, 'gzip, deflate, br', 1 << 20)).toBe(stored);
  });

  it('is the decoded response, without Content-Encoding, for a client that does not', () => {
    expect(responseForClient(stored, undefined, 1 << 20)).toEqual({
      status: 201,
      headers: { 'content-type': 'application/json', vary: 'accept-encoding' },
      body: BODY,
    });
  });

  it('is the stored response when it has no coding', () => {
    const plain = { status: 201, headers: { 'content-type': 'application/json' }, body: BODY };
    expect(responseForClient(plain, undefined, 1 << 20)).toBe(plain);
  });

  it('is undefined when it does not decode within maxBytes', () => {
    expect(responseForClient(stored, undefined, BODY.length - 1)).toBeUndefined();
  });
});

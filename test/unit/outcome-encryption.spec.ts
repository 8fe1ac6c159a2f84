import { randomBytes } from 'node:crypto';
import { IdempotencySetupError, type IdempotencyScope, type StoredResponse } from '../../src/index.js';
import { EnvelopeUnreadableError, openEnvelope, sealEnvelope } from '../../src/protocol/outcome-envelope.js';
import { ENVELOPE_HEADER, OutcomeSealing } from '../../src/protocol/outcome-sealing.js';

const scope: IdempotencyScope = { account: 'acct_1', endpoint: 'POST /charges', key: 'key-1' };
const keyA = { id: 'A', key: randomBytes(32) };
const keyB = { id: 'B', key: randomBytes(32) };
const ringOf = (...keys: Array<{ id: string; key: Buffer }>) => new Map(keys.map(({ id, key }) => [id, key]));
const plaintext = Buffer.from('{"card":"4242 4242 4242 4242"}');
const response: StoredResponse = {
  status: 201,
  headers: { 'content-type': 'application/json', location: '/charges/ch_1', 'x-list': ['a', 'b'] },
  body: plaintext,
};

/** The envelope with one byte at `offset` flipped. */
function flipped(envelope: Buffer, offset: number): Buffer {
  const copy = Buffer.from(envelope);
  copy[offset] = copy[offset] ^ 0x01;
  return copy;
}

describe('the outcome envelope (AES-256-GCM)', () => {
  const envelope = sealEnvelope(plaintext, keyA, scope);
  // version, key id length, key id 'A', IV (12), tag (16), ciphertext
  const layout = { version: 0, keyIdLength: 1, keyId: 2, iv: 3, tag: 15, ciphertext: 31 };

  it('opens what it sealed, and holds no plaintext', () => {
    expect(openEnvelope(envelope, ringOf(keyA), scope)).toEqual(plaintext);
    expect(envelope.includes(Buffer.from('4242'))).toBe(false);
    expect(envelope.length).toBe(layout.ciphertext + plaintext.length);
  });

  it('seals with a random IV: the same outcome twice gives two envelopes', () => {
    expect(sealEnvelope(plaintext, keyA, scope).equals(envelope)).toBe(false);
  });

  it.each(Object.entries(layout))('refuses an envelope whose %s was altered', (_part, offset) => {
    expect(() => openEnvelope(flipped(envelope, offset), ringOf(keyA), scope)).toThrow(EnvelopeUnreadableError);
  });

  it.each([0, 1, 10, 30, envelope.length - 1])('refuses an envelope truncated to %i bytes', (length) => {
    expect(() => openEnvelope(envelope.subarray(0, length), ringOf(keyA), scope)).toThrow(EnvelopeUnreadableError);
  });

  it.each<[string, IdempotencyScope]>([
    ['another key', { ...scope, key: 'key-2' }],
    ['another account', { ...scope, account: 'acct_2' }],
    ['another endpoint', { ...scope, endpoint: 'POST /refunds' }],
    // The same characters split otherwise: the length prefixes keep them apart.
    ['the same text split otherwise', { account: 'acct_1POST', endpoint: ' /charges', key: 'key-1' }],
  ])('refuses the envelope of another scope (%s): the AAD binds it to its record', (_what, other) => {
    expect(() => openEnvelope(envelope, ringOf(keyA), other)).toThrow(/authentication failed with key "A"/);
  });

  it('refuses an envelope whose key is not in the ring, naming the key id', () => {
    expect(() => openEnvelope(envelope, ringOf(keyB), scope)).toThrow(/key "A", which is not in the key ring/);
  });

  it('refuses an envelope whose key id names another key of the ring (the key id is authenticated)', () => {
    const relabelled = Buffer.from(envelope);
    relabelled.write('B', layout.keyId);
    expect(() => openEnvelope(relabelled, ringOf(keyA, keyB), scope)).toThrow(/authentication failed with key "B"/);
  });

  it('refuses an envelope of another version', () => {
    const later = Buffer.from(envelope);
    later[0] = 2;
    expect(() => openEnvelope(later, ringOf(keyA), scope)).toThrow(/version 2 is not one this build reads/);
  });
});

describe('OutcomeSealing', () => {
  it('seals headers and body, keeps the status in clear, and opens them again', () => {
    const sealing = OutcomeSealing.from({ keys: [keyA] });
    const sealed = sealing.seal(scope, response);
    expect(sealed.status).toBe(201);
    expect(Object.keys(sealed.headers)).toEqual([ENVELOPE_HEADER]);
    expect(sealed.body.includes(Buffer.from('ch_1'))).toBe(false);
    expect(sealing.open(scope, sealed)).toEqual(response);
  });

  it('refuses a record whose status column was altered (a declined charge made 200), as it refuses any altered byte', () => {
    const sealing = OutcomeSealing.from({ keys: [keyA] });
    const sealed = sealing.seal(scope, response);
    expect(() => sealing.open(scope, { ...sealed, status: 200 })).toThrow(
      /status column says 200, and the status sealed with it is 201/,
    );
  });

  it('opens across a rotation: sealed with A, opened by the ring [B, A], which seals new outcomes with B', () => {
    const sealedWithA = OutcomeSealing.from({ keys: [keyA] }).seal(scope, response);
    const rotated = OutcomeSealing.from({ keys: [{ id: 'B', key: keyB.key.toString('base64') }, keyA] });
    expect(rotated.open(scope, sealedWithA)).toEqual(response);
    const sealedWithB = rotated.seal(scope, response);
    expect(sealedWithB.body.subarray(2, 3).toString()).toBe('B');
    expect(() => OutcomeSealing.from({ keys: [keyA] }).open(scope, sealedWithB)).toThrow(/key "B"/);
  });

  it('refuses a plaintext record unless acceptPlaintext, and a sealed one without a ring', () => {
    expect(() => OutcomeSealing.from({ keys: [keyA] }).open(scope, response)).toThrow(/plaintext/);
    expect(OutcomeSealing.from({ keys: [keyA], acceptPlaintext: true }).open(scope, response)).toBe(response);
    // Accepting plaintext during a switch-over still seals what it stores: it opens once plaintext is refused again.
    const sealedDuringSwitch = OutcomeSealing.from({ keys: [keyA], acceptPlaintext: true }).seal(scope, response);
    expect(sealedDuringSwitch.body.equals(response.body)).toBe(false);
    expect(OutcomeSealing.from({ keys: [keyA] }).open(scope, sealedDuringSwitch)).toEqual(response);
    const sealed = OutcomeSealing.from({ keys: [keyA] }).seal(scope, response);
    expect(() => OutcomeSealing.from(undefined).open(scope, sealed)).toThrow(/no encryption key ring/);
    expect(OutcomeSealing.from(undefined).seal(scope, response)).toBe(response);
  });

  it.each<[string, unknown, RegExp]>([
    ['an empty ring', { keys: [] }, /encryption.keys must be a non-empty array/],
    ['no ring', {}, /encryption.keys must be a non-empty array/],
    [
      'a 16-byte key',
      { keys: [{ id: 'A', key: randomBytes(16) }] },
      /keys\[0\].key \(id "A"\) must be 32 bytes.*got 16 bytes/,
    ],
    ['a short base64 key', { keys: [{ id: 'A', key: 'c2hvcnQ=' }] }, /must be 32 bytes.*randomBytes\(32\)/],
    ['a duplicate id', { keys: [keyA, { id: 'A', key: keyB.key }] }, /holds the id "A" twice/],
    ['an empty id', { keys: [{ id: '', key: keyA.key }] }, /keys\[0\].id must be a string of 1 to 255 bytes/],
    [
      'a non-boolean acceptPlaintext',
      { keys: [keyA], acceptPlaintext: 'false' },
      /acceptPlaintext must be true or false/,
    ],
  ])('refuses %s at start-up, naming the fix', (_what, encryption, message) => {
    expect(() => OutcomeSealing.from(encryption as never)).toThrow(message);
  });

  it('refuses a bad ring with an IdempotencySetupError', () => {
    expect(() => OutcomeSealing.from({ keys: [] })).toThrow(IdempotencySetupError);
  });
});

import { GraphQLClient } from 'graphql-request';
import { ALICE, BOB, PLATFORMS, postCharge, startSampleApp } from '../support/sample-app.js';
import { useTestDatabase } from '../support/test-database.js';

const CREATE_CHARGE = /* GraphQL */ `
  mutation CreateCharge($input: ChargeInput!, $key: String) {
    createCharge(input: $input, idempotencyKey: $key) {
      id
      amount
      currency
    }
  }
`;

interface CreatedCharge {
  createCharge: { id: string; amount: number; currency: string; status?: string } | null;
}

const db = useTestDatabase();

describe.each(PLATFORMS)("the sample app's createCharge mutation on %s", (platform) => {
  let app: Awaited<ReturnType<typeof startSampleApp>>;

  beforeAll(async () => {
    app = await startSampleApp({ databaseUrl: db.url, platform, databasePoolSize: 5 });
  });
  afterAll(() => app?.close());

  /** graphql-request against the app's /graphql, as a client with `apiKey`'s account. */
  const client = (apiKey = ALICE, headers: Record<string, string> = {}) =>
    new GraphQLClient(`${app.url}/graphql`, {
      headers: { authorization: `Bearer ${apiKey}`, ...headers },
      errorPolicy: 'all',
    });
  const chargesOf = async (account: string) =>
    (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM charges WHERE account = $1', [account]))[0].n;
  const providerChargesOf = async (account: string) =>
    (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM provider_charges WHERE account = $1', [account]))[0]
      .n;

  it('creates one charge per key, charged once at the provider, and replays it with another selection', async () => {
    const input = { amount: 1500, currency: 'eur' };
    const key = `gql-once-${platform}`;
    const [before, providerBefore] = [await chargesOf(ALICE), await providerChargesOf(ALICE)];
    const first = await client().rawRequest<CreatedCharge>(CREATE_CHARGE, { input, key });
    expect(first.status).toBe(200);
    expect(first.data.createCharge).toEqual({ id: expect.stringMatching(/^ch_/), amount: 1500, currency: 'eur' });
    const replay = await client().rawRequest<CreatedCharge>(
      'mutation($input: ChargeInput!, $key: String) { createCharge(input: $input, idempotencyKey: $key) { id status } }',
      { input, key },
    );
    expect(replay.status).toBe(200);
    expect(replay.data.createCharge).toEqual({ id: first.data.createCharge?.id, status: 'succeeded' });
    expect(await chargesOf(ALICE)).toBe(before + 1);
    expect(await providerChargesOf(ALICE)).toBe(providerBefore + 1);
  });

  it("replays a declined card's error as it was answered: the same message and extensions", async () => {
    const input = { amount: 1500, currency: 'eur', source: 'tok_chargeDeclined' };
    const key = `gql-declined-${platform}`;
    const first = await client().rawRequest<CreatedCharge>(CREATE_CHARGE, { input, key });
    const replay = await client().rawRequest<CreatedCharge>(CREATE_CHARGE, { input, key });
    const [firstError, replayError] = [first.errors?.[0], replay.errors?.[0]];
    expect(firstError?.message).toBe('Your card was declined.');
    expect(replayError?.message).toBe(firstError?.message);
    expect(replayError?.extensions).toEqual(firstError?.extensions);
  });

  it("scopes keys by the API key's account, as the REST route does, and shares no record with it", async () => {
    const key = `gql-shared-${platform}`;
    const input = { amount: 700, currency: 'usd' };
    const before = await chargesOf(BOB);
    await client(ALICE).request(CREATE_CHARGE, { input, key });
    const bob = await client(BOB).request<CreatedCharge>(CREATE_CHARGE, { input, key });
    const rest = await postCharge(app.url, input, key, BOB);
    expect(rest.status).toBe(201);
    expect((rest.body as { id: string }).id).not.toBe(bob.createCharge?.id);
    expect(await chargesOf(BOB)).toBe(before + 2);
  });

  it('takes the key from the Idempotency-Key header too, and refuses a mutation without one', async () => {
    const mutation = 'mutation($input: ChargeInput!) { createCharge(input: $input) { id } }';
    const input = { amount: 900, currency: 'eur' };
    const headers = { 'idempotency-key': `gql-header-${platform}` };
    const first = await client(ALICE, headers).request<CreatedCharge>(mutation, { input });
    expect(await client(ALICE, headers).request<CreatedCharge>(mutation, { input })).toEqual(first);
    const keyless = await client().rawRequest(mutation, { input });
    expect(keyless.status).toBe(200);
    expect(keyless.errors?.[0].extensions).toEqual({ code: 'IDEMPOTENCY_KEY_REQUIRED' });
  });

  it('answers an invalid input as GraphQL errors, and leaves the key free for the corrected retry', async () => {
    const key = `gql-invalid-${platform}`;
    const invalid = await client().rawRequest(CREATE_CHARGE, { input: { amount: 0, currency: 'eur' }, key });
    expect(invalid.errors?.[0].message).toContain('amount must be a positive integer');
    const fixed = await client().rawRequest<CreatedCharge>(CREATE_CHARGE, {
      input: { amount: 5, currency: 'eur' },
      key,
    });
    expect(fixed.data.createCharge?.amount).toBe(5);
  });

  it('refuses an operation without an API key', async () => {
    const answer = await new GraphQLClient(`${app.url}/graphql`, { errorPolicy: 'all' }).rawRequest(CREATE_CHARGE, {
      input: { amount: 5, currency: 'eur' },
      key: `gql-anonymous-${platform}`,
    });
    expect(answer.errors?.[0].message).toContain('Send a valid API key');
  });
});

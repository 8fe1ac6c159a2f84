import { randomUUID } from 'node:crypto';
import type { IdempotencyScope, IdempotencyStore } from '../../src/store/index.js';
import type { IdempotencyOperations } from '../../src/store-kit/operator-records.js';

/** What the operator's step cases run on: a store, the operator of its records, and scopes of their own. */
export interface OperatorStepsSubject {
  store: IdempotencyStore;
  operator: IdempotencyOperations;
  /** A scope no other case uses, in the store's records. */
  newScope: () => IdempotencyScope;
}

const LONG = { leaseSeconds: 60, ttlSeconds: 3600 };
const OUTCOME = { status: 201, headers: {}, body: Buffer.from('{}') };

/**
 * The cases of an operator (`IdempotencyOperator`, `RedisIdempotencyOperator`) on records with steps, each store's
 * the same: their names shown (never their results), and the operator's release of a record the store released with
 * its steps (deleted, steps and all, fenced on the token its release gave it), of one a live attempt holds, and never
 * of a completed one. `subject` is read when a case runs (a block's, made in its `beforeAll`).
 */
export function operatorStepsCases(subject: () => OperatorStepsSubject): void {
  /** A record of a new scope claimed with fingerprint `fp`, its steps recorded in order; its scope and attempt. */
  async function withSteps(names: string[]): Promise<{ scope: IdempotencyScope; attempt: string }> {
    const { store, newScope } = subject();
    const scope = newScope();
    const attempt = randomUUID();
    expect(await store.claim(scope, 'fp', attempt, LONG)).toEqual({ claimed: true, takeover: false });
    for (const name of names) {
      expect(await store.recordStep!({ scope, attempt }, { name, result: JSON.stringify({ secret: name }) })).toBe(
        true,
      );
    }
    return { scope, attempt };
  }

  it("shows the names of a record's steps in order, never their results, in every listing; none as []", async () => {
    const { store, operator } = subject();
    const { scope, attempt } = await withSteps(['create-charge', 'charge-card', 'send-receipt']);
    const bare = await withSteps([]);
    try {
      const record = await operator.inspect(scope);
      expect(record).toMatchObject({ state: 'running', steps: ['create-charge', 'charge-card', 'send-receipt'] });
      expect(JSON.stringify(record)).not.toContain('secret');
      expect((await operator.find({ key: scope.key }))[0].steps).toEqual(record!.steps);
      expect((await operator.find({ key: scope.key }, { body: true }))[0].steps).toEqual(record!.steps);
      expect((await operator.list('running')).find(({ key }) => key === scope.key)?.steps).toEqual(record!.steps);
      expect(await operator.inspect(bare.scope)).toMatchObject({ steps: [] });
    } finally {
      await store.release(bare);
      await operator.release(scope, attempt);
    }
  });

  it('discards a record the store released with its steps, fenced on the token its release gave it', async () => {
    const { store, operator } = subject();
    const { scope, attempt } = await withSteps(['create-charge', 'charge-card']);
    // The store's release keeps it, for the same request to resume: its lease ended, held by a token no attempt has.
    expect(await store.release({ scope, attempt })).toBe(true);
    const kept = await operator.inspect(scope);
    expect(kept).toMatchObject({
      state: 'lease-lapsed',
      status: 'in_progress',
      steps: ['create-charge', 'charge-card'],
    });
    expect(kept!.attempt).toMatch(/^[0-9a-f-]{36}$/);
    expect(kept!.attempt).not.toBe(attempt);
    expect((await operator.stuck()).find(({ key }) => key === scope.key)).toEqual(kept);
    // Another request of the key is refused while the record stands.
    expect(await store.claim(scope, 'other-fp', randomUUID(), LONG)).toMatchObject({
      claimed: false,
      existing: { status: 'in_progress' },
    });

    for (const wrong of [attempt, randomUUID(), '']) {
      expect(await operator.release(scope, wrong)).toEqual({ outcome: 'other-attempt', record: kept });
    }
    expect(await operator.release(scope, kept!.attempt)).toEqual({ outcome: 'released' });
    expect(await operator.inspect(scope)).toBeUndefined();
    expect(await operator.release(scope, kept!.attempt)).toEqual({ outcome: 'not-found' });
    // Steps and all: another request of the key now claims it anew, with no step to resume from.
    const next = randomUUID();
    expect(await store.claim(scope, 'other-fp', next, LONG)).toEqual({ claimed: true, takeover: false });
    await store.release({ scope, attempt: next });
  });

  it('refuses the release of an operator who read the record before a retry resumed it and released it again', async () => {
    const { store, operator } = subject();
    const { scope, attempt } = await withSteps(['create-charge']);
    await store.release({ scope, attempt });
    const seen = await operator.inspect(scope);
    // A retry resumes it, records a step, and fails again: the record moved on since the operator read it.
    const retry = { scope, attempt: randomUUID() };
    expect(await store.claim(scope, 'fp', retry.attempt, LONG)).toMatchObject({ claimed: true, takeover: true });
    expect(await store.recordStep!(retry, { name: 'charge-card', result: '1' })).toBe(true);
    expect(await store.release(retry)).toBe(true);
    expect(await operator.release(scope, seen!.attempt)).toMatchObject({ outcome: 'other-attempt' });
    const now = await operator.inspect(scope);
    expect(now?.steps).toEqual(['create-charge', 'charge-card']);
    expect(await operator.release(scope, now!.attempt)).toEqual({ outcome: 'released' });
  });

  it('discards a record with steps held by a live attempt, fenced on it, and never a completed one', async () => {
    const { store, operator } = subject();
    const { scope, attempt } = await withSteps(['create-charge']);
    for (const wrong of ['', randomUUID()]) {
      expect(await operator.release(scope, wrong)).toMatchObject({ outcome: 'other-attempt', record: { attempt } });
    }
    expect(await operator.release(scope, attempt)).toEqual({ outcome: 'released' });
    const next = randomUUID();
    expect(await store.claim(scope, 'fp', next, LONG)).toEqual({ claimed: true, takeover: false });
    await store.release({ scope, attempt: next });

    const completed = await withSteps(['create-charge']);
    expect(await store.complete(completed, OUTCOME, LONG.ttlSeconds)).toBe(true);
    expect(await operator.inspect(completed.scope)).toMatchObject({ state: 'completed', steps: ['create-charge'] });
    for (const tried of [completed.attempt, '']) {
      expect(await operator.release(completed.scope, tried)).toMatchObject({ outcome: 'completed' });
    }
  });
}

import type { EntityManager, EntityTarget, ObjectLiteral, QueryRunner } from 'typeorm';

/**
 * Makes `manager` run its operations on `currentRunner()` whenever that returns a query runner, and as before
 * otherwise. TypeORM's entity manager runs every operation on its own query runner when it has one (else on a
 * pooled connection of its own), and a repository runs everything through its manager, so this one property is
 * what every repository made from the manager follows, including those made before this call.
 */
export function enlistEntityManager(manager: EntityManager, currentRunner: () => QueryRunner | undefined): void {
  // A repository keeps the query runner its manager had when it was made: one made (and cached) inside a run
  // would keep that run's, long released, so repositories are made as if outside any run.
  let makingRepository = 0;
  const madeOutsideRuns =
    <R>(make: (target: EntityTarget<ObjectLiteral>) => R) =>
    (target: EntityTarget<ObjectLiteral>): R => {
      makingRepository += 1;
      try {
        return make.call(manager, target);
      } finally {
        makingRepository -= 1;
      }
    };
  Object.defineProperty(manager, 'queryRunner', {
    configurable: true,
    get: () => (makingRepository > 0 ? undefined : currentRunner()),
  });
  /* eslint-disable @typescript-eslint/unbound-method -- the originals, which madeOutsideRuns calls with .call(manager) */
  Object.defineProperty(manager, 'getRepository', {
    configurable: true,
    writable: true,
    value: madeOutsideRuns(manager.getRepository),
  });
  Object.defineProperty(manager, 'getTreeRepository', {
    configurable: true,
    writable: true,
    value: madeOutsideRuns(manager.getTreeRepository),
  });
  /* eslint-enable @typescript-eslint/unbound-method */
}

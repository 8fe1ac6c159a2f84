// Nest 12 is ESM only: the tests run as ES modules (NODE_OPTIONS=--experimental-vm-modules, set by `npm test`).
/** @type {import('jest').Config} */
export default {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.e2e-spec.ts'],
  extensionsToTreatAsEsm: ['.ts'],
  // Sources import each other as `./x.js` (NodeNext); Jest resolves them to the `.ts` files.
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: 'tsconfig.json' }] },
  testTimeout: 30_000,
};

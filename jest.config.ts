import type { Config } from 'jest';

const config: Config = {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  // Sources import each other NodeNext-style (`./x.js`); Jest resolves the `.ts` file.
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: 'tsconfig.json' }] },
  testMatch: ['<rootDir>/test/**/*.spec.ts'],
  // Starts an embedded PostgreSQL when DATABASE_URL is unset; every test file then makes its own database.
  globalSetup: '<rootDir>/test/support/global-setup.mjs',
  globalTeardown: '<rootDir>/test/support/global-teardown.mjs',
  // Stops the child processes a test file spawned, whatever its tests' outcomes.
  setupFilesAfterEnv: ['<rootDir>/test/support/after-each-file.ts'],
  testTimeout: 60_000,
  maxWorkers: 2,
  // A worker keeps every test file's sandbox, modules and all, after the file ends (ES modules under
  // --experimental-vm-modules: the heap after a full GC grows ~2.5 MB per empty test file, 10-15 MB per e2e file).
  // A worker past this size is replaced between files: one left at ~600 MB took longer than Jest's 500 ms to exit at
  // the end of the run ("A worker process has failed to exit gracefully"), though it had nothing open.
  workerIdleMemoryLimit: '256MB',
};

export default config;

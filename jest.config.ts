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
};

export default config;

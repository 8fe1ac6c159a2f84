// `nest-idempotency/testing`: for tests only. The contract every `IdempotencyStore` passes, to run against a store
// of your own with your test runner's `describe` and `it`; the in-memory store under `IDEMPOTENCY_STORE` of a testing
// module, on a clock the test moves; and the assertion that a request is replayed. (`InMemoryIdempotencyStore` is in
// the main entry.)
export {
  type InMemoryStoreUnderTest,
  type ProviderOverriding,
  useInMemoryIdempotencyStore,
} from './in-memory-store-override.js';
export {
  assertReplayed,
  type FetchAnswer,
  type HttpAnswer,
  type ReplayAssertionOptions,
  type SupertestAnswer,
} from './replay-assertion.js';
export {
  type ContractTestRunner,
  describeIdempotencyStoreContract,
  type StoreContractOptions,
  type StoreUnderTest,
} from './store-contract.js';

// `nest-idempotency/testing`: for tests only. The contract every `IdempotencyStore` passes, to run against a store
// of your own with your test runner's `describe` and `it`. (`InMemoryIdempotencyStore` is in the main entry.)
export {
  type ContractTestRunner,
  describeIdempotencyStoreContract,
  type StoreContractOptions,
  type StoreUnderTest,
} from './store-contract.js';

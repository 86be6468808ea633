// Package provider is the storage contract of duroq's runtime, the Go shape of
// duroxide's provider trait: what a backend implements so that package runtime can
// run orchestrations on it. Application code rarely needs it beyond passing a
// Provider to runtime.New and reading a history of Events.
//
// A Provider is two peek-lock queues and an append-only history per execution:
//   - the orchestrator queue, locked per instance: FetchOrchestrationItem returns an
//     instance's pending WorkItems with its history, and AckOrchestrationItem commits
//     the turn — the new Events, the activities, timers and messages it scheduled,
//     and the instance's ExecutionMetadata — with the ack of exactly those messages,
//     atomically;
//   - the worker queue of activities: FetchWorkItem and AckWorkItem, whose completion
//     goes to the orchestrator queue in the same commit.
//
// ProviderAdmin (through ManagedProvider) lists, inspects, deletes and prunes
// instances; BatchProvider, ChangeNotifier, InstanceWatcher, PendingStartReader and
// ReasonAbandoner are optional capabilities the runtime uses when a provider has
// them. Errors are classified with Permanent and Retryable (IsRetryable) and match
// the sentinel errors with errors.Is.
//
// Events and work items are plain structs whose Kind decides which fields matter;
// MarshalEvent and MarshalWorkItem give their stored form (a format byte, then msgpack
// with named fields). Package adapter implements the contract over a queue and an
// event store; conformance.TestProvider checks any implementation against a port of
// duroxide's provider validation suite.
package provider

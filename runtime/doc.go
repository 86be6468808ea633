// Package runtime is duroq's durable-execution runtime and the storage contract it
// runs on.
//
// The contract is Provider (with ProviderAdmin for management): two peek-lock queues —
// the orchestrator queue, locked per instance, and the worker queue of activities —
// and an append-only history per execution. It is the Go shape of duroxide's
// provider trait; package adapter implements it over an mq.MessageQueue and an
// eventstore.EventStore, and conformance.TestProvider checks any implementation
// against a port of duroxide's provider validation suite.
//
// Events and work items are plain structs whose Kind decides which fields matter;
// MarshalEvent and MarshalWorkItem give their stored form (a format byte, then
// msgpack with named fields, so old rows stay readable when fields are added).
package runtime

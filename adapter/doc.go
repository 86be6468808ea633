// Package adapter composes an mq.MessageQueue and an eventstore.EventStore into the
// runtime's full provider contract (provider.Provider and provider.ProviderAdmin).
//
// Mapping:
//   - Orchestrator traffic is the queue "orchestrator" with routing key = instance id
//     (sub-orchestration completions route to the parent), so one routing-key batch
//     is exactly duroxide's instance-locked orchestration item. Timers are delayed
//     orchestrator messages, visible at their fire time.
//   - Worker traffic is the queue "worker", un-keyed, carrying the activity's tag and
//     session, with a message key per scheduled activity (instance, execution, id):
//     cancelling an activity removes its message, and the worker's next renew or ack
//     fails (lock stealing).
//   - An instance is a stream; an execution is a partition. Metadata, custom status
//     and KV state live in the event store; the pinned runtime version of the current
//     execution is also the routing key's attribute, so the capability filter is
//     applied by the queue before anything is locked or any history read.
//   - A started instance that has not run yet is a start message still queued under
//     its key (PendingStart peeks for it, provider.PendingStartReader); why a runtime
//     gave it back is the message's last error (mq.AbandonOptions.Reason, through
//     provider.ReasonAbandoner).
//
// AckOrchestrationItem is one transaction across both primitives: lock check,
// history append, KV, metadata, custom status, key attribute, enqueues, activity
// cancellations (after the inserts) and the ack of exactly the fetched messages. Any
// failure rolls everything back and leaves the lock held. New accepts any pair that
// can commit together — an mq.TxQueue and an eventstore.TxStore whose Databases are
// equal (package txn): the in-memory pair sharing a txn.MemoryDatabase (NewMemory),
// the SQLite pair on one database (package sqliteprovider), the PostgreSQL pair on
// one pool (package pgprovider), or a pair of backends written elsewhere — and
// refuses others with ErrNotComposable, since no protocol here makes separate
// commits crash-safe. The adapter knows no backend and links no database driver: it
// runs each commit through the pair's txn.Database and their In methods.
package adapter

// Package conformance holds importable conformance suites for duroq backends.
//
// Each suite is an ordinary function that takes a *testing.T and a factory, and runs
// every case as a subtest on a fresh instance made by the factory, so a backend's own
// _test.go proves the contract with one call:
//
//	func TestConformance(t *testing.T) {
//		conformance.TestMessageQueue(t, conformance.QueueFactory{
//			New: func(t *testing.T, now func() time.Time) mq.MessageQueue {
//				return newBackend(t, Options{Now: now})
//			},
//		})
//	}
//
// Suites:
//   - TestMessageQueue: the mq.MessageQueue contract (routing-key batches, locks,
//     visibility, tags, sessions, key attributes, message keys, long polls,
//     concurrency, bad input; order under failure, bounded batches, DequeueBatches,
//     message-by-message Settle) and the mq.Admin contract (Peek, Redrive, Purge,
//     Queues, Pause and Resume), which every backend must implement. The suite owns
//     the backend's clock: the factory gets now, and the backend must take every
//     time from it (lock expiry and Renew, the visibility of delayed and abandoned
//     messages, session leases and activity, EnqueuedAt and the failure and
//     dead-letter times) and turn the times a long poll waits for into durations
//     with it. The clock stands still until a case advances it, so the cases that
//     check a lock lapse, the end of a delay or a session lease advance it instead
//     of sleeping, and hold however slowly the test runs. Only the long-poll cases
//     (a waiting DequeueBatch woken by an Enqueue, an Ack, an Abandon, a Resume, the
//     clock passing the end of a delay or a lock, a canceled context, a Close) take
//     real time: they run in parallel and wait for the event with a bound.
//   - TestEventStore: the eventstore.EventStore contract.
//   - TestProvider: a Go port of duroxide's provider validation suite (0.1.26, plus
//     the 0.1.27 additions), one subtest per duroxide test, named Group/Case;
//     provider_tests.md (generated, checked by TestProviderTable) maps each duroxide
//     test name to its Go subtest.
//
// Nothing passes by skipping where it matters. A provider case that needs a
// capability the factory lacks (management, a test hook) is skipped, and the suite
// then fails with a "not conformant" summary line unless the factory sets Partial. A
// queue long-poll check that ran too slowly to tell (its event came after the Wait
// ended) is skipped as inconclusive, or fails when StrictTimingEnv is set, as duroq's
// CI sets it.
//
// The suites use the standard library's testing package only, and depend on the
// contract packages, never on a backend.
package conformance

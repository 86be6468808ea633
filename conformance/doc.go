// Package conformance holds importable conformance suites for duroq backends.
//
// Each suite is an ordinary function that takes a *testing.T and a factory, and runs
// every case as a subtest on a fresh instance made by the factory, so a backend's own
// _test.go proves the contract with one call:
//
//	func TestConformance(t *testing.T) {
//		conformance.TestMessageQueue(t, conformance.QueueFactory{
//			New: func(t *testing.T) mq.MessageQueue { return newBackend(t) },
//		})
//	}
//
// The suites use the standard library's testing package only, and depend on the
// contract packages, never on a backend.
package conformance

// Package bench holds duroq's importable benchmarks, one family per layer. Each
// backend runs them from its own _test.go with a factory, so every backend is measured
// by the same code:
//
//	func BenchmarkQueue(b *testing.B) { bench.MessageQueue(b, newQueue) }
//
// The benchmarks report ns/op and a throughput metric (msgs/s, events/s) with their
// setup in the sub-benchmark name.
//
// The loads behind `duroq bench` live here too: Load runs a runtime workload in one
// process; Serve (the runtimes) and Drive (the client that starts the instances) are
// its halves for a run spread over several processes; QueueLoad and QueueCycle
// measure the queue alone.
package bench

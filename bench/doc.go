// Package bench holds duroq's importable benchmarks, one family per layer. Each
// backend runs them from its own _test.go with a factory, so every backend is measured
// by the same code:
//
//	func BenchmarkQueue(b *testing.B) { bench.MessageQueue(b, newQueue) }
//
// The benchmarks report ns/op and a throughput metric (msgs/s, events/s) with their
// setup in the sub-benchmark name.
package bench

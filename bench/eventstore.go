package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/duroq/duroq/eventstore"
)

// EventStoreFactory returns a fresh, empty store for one benchmark; the harness
// closes it.
type EventStoreFactory func(b *testing.B) eventstore.EventStore

// esEventSize is the payload of every benchmark event: about the size of an encoded
// runtime event with a short input.
const esEventSize = 200

// esAppendsPerStream bounds the partitions Append grows: every this many calls the
// benchmark moves to a new stream, as a runtime moves between instances.
const esAppendsPerStream = 100

// EventStore runs the event store benchmarks against the stores f makes:
//
//   - Append/events={1,10}: one Append call (one transaction) of that many 200-byte
//     events to the current stream;
//   - Read/events={10,100,1000}: one Read of a partition holding that many events,
//     integrity checks included.
//
// An op is one call; each reports events/s beside ns/op.
func EventStore(b *testing.B, f EventStoreFactory) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("Append/events=%d", n), func(b *testing.B) { benchAppend(b, f, n) })
	}
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("Read/events=%d", n), func(b *testing.B) { benchRead(b, f, n) })
	}
}

func esOpen(b *testing.B, f EventStoreFactory) eventstore.EventStore {
	b.Helper()
	s := f(b)
	b.Cleanup(func() { s.Close() })
	return s
}

func esBatch(from int64, n int) []eventstore.Event {
	data := make([]byte, esEventSize)
	events := make([]eventstore.Event, n)
	for i := range events {
		events[i] = eventstore.Event{Seq: from + int64(i), Type: "ActivityCompleted", Data: data}
	}
	return events
}

// benchAppend: an op is one Append call of n events.
func benchAppend(b *testing.B, f EventStoreFactory, n int) {
	s := esOpen(b, f)
	ctx := context.Background()
	batches := make([][]eventstore.Event, esAppendsPerStream)
	for i := range batches {
		batches[i] = esBatch(int64(i*n+1), n)
	}
	b.SetBytes(int64(n * esEventSize))
	calls := 0
	for b.Loop() {
		stream := fmt.Sprintf("bench-%d", calls/esAppendsPerStream)
		if err := s.Append(ctx, stream, 1, batches[calls%esAppendsPerStream]); err != nil {
			b.Fatalf("Append: %v", err)
		}
		calls++
	}
	b.ReportMetric(float64(calls*n)/b.Elapsed().Seconds(), "events/s")
}

// benchRead: an op is one Read of a partition of n events.
func benchRead(b *testing.B, f EventStoreFactory, n int) {
	s := esOpen(b, f)
	ctx := context.Background()
	for from := 0; from < n; from += 100 {
		if err := s.Append(ctx, "bench", 1, esBatch(int64(from+1), min(100, n-from))); err != nil {
			b.Fatalf("prefill: %v", err)
		}
	}
	b.SetBytes(int64(n * esEventSize))
	reads := 0
	for b.Loop() {
		events, err := s.Read(ctx, "bench", 1)
		if err != nil || len(events) != n {
			b.Fatalf("Read = %d events, %v; want %d", len(events), err, n)
		}
		reads++
	}
	b.ReportMetric(float64(reads*n)/b.Elapsed().Seconds(), "events/s")
}

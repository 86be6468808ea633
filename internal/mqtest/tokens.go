package mqtest

import (
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/google/uuid"
)

// LockTokensAreTimeOrderedAndDistinct checks that an empty queue "q" of q gives
// every batch, un-keyed or keyed, a lock token of its own that is a UUIDv7
// (time-ordered, so a token index grows at its right edge; see mqsql.NewToken),
// and that each token settles its batch.
func LockTokensAreTimeOrderedAndDistinct(t *testing.T, q mq.MessageQueue) {
	t.Helper()
	ctx := t.Context()
	msgs := []mq.Message{{Queue: "q", Payload: []byte("a")}, {Queue: "q", Payload: []byte("b")}, {Queue: "q", Payload: []byte("c")},
		{Queue: "q", RoutingKey: "k", Payload: []byte("d")}, {Queue: "q", RoutingKey: "k", Payload: []byte("e")}}
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	bs, err := q.DequeueBatches(ctx, "q", mq.DequeueOptions{LockTimeout: time.Minute}, 10)
	if err != nil || len(bs) != 4 {
		t.Fatalf("DequeueBatches: %d batches, %v; want 3 un-keyed and 1 keyed", len(bs), err)
	}
	seen := map[string]bool{}
	for _, b := range bs {
		u, err := uuid.Parse(b.Token)
		if err != nil || u.Version() != 7 {
			t.Errorf("batch %q token %q: version %v, %v; want a UUIDv7", b.RoutingKey, b.Token, u.Version(), err)
		}
		if seen[b.Token] {
			t.Errorf("token %q given to two batches", b.Token)
		}
		seen[b.Token] = true
	}
	for _, b := range bs {
		if err := q.Ack(ctx, b.Token); err != nil {
			t.Fatalf("Ack %q: %v", b.Token, err)
		}
	}
	if st, err := q.Stats(ctx, "q"); err != nil || st.Ready+st.Locked+st.Delayed != 0 {
		t.Fatalf("after acking every batch: %+v, %v; want an empty queue", st, err)
	}
}

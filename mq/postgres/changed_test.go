package postgres_test

import (
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// TestChangedSeesAnotherInstancesCommits: two queues on one schema stand for two
// processes. The waiter never long-polls, as a web process whose clients only wait
// for instances another process runs; an Enqueue through the writer, and an Ack
// that leaves its queue empty (an instance's last turn), close its Changed channel.
func TestChangedSeesAnotherInstancesCommits(t *testing.T) {
	waiter, dsn, schema := openSchema(t)
	writer := openOn(t, dsn, schema)
	ctx := t.Context()

	// Changed starts the listener, whose connection wakes every waiter once.
	wantClosed(t, waiter.Changed(), "the listener's start")

	ch := waiter.Changed()
	if err := writer.Enqueue(ctx, mq.Message{Queue: "q", RoutingKey: "instance", Payload: []byte("turn")}); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, ch, "an Enqueue through another instance")

	b, err := writer.DequeueBatch(ctx, "q", mq.DequeueOptions{LockTimeout: time.Minute})
	if err != nil || b == nil {
		t.Fatalf("dequeue: %v %v", b, err)
	}
	ch = waiter.Changed()
	if err := writer.Ack(ctx, b.Token); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, ch, "an Ack through another instance")
}

func wantClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("Changed not closed 10 s after %s", what)
	}
}

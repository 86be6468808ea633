package sqlite_test

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/sqliteconn/sqliteconntest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

// A queue opened by path is closed when Close returns: its WAL is checkpointed into
// the file and the side files are gone, so a copy of the file alone holds every
// message; a second Close is harmless.
func TestCloseLeavesEverythingInTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openQueue(t, path)
	err := q.Enqueue(t.Context(), mq.Message{Queue: "q", RoutingKey: "k", Payload: []byte("one")},
		mq.Message{Queue: "q", Payload: []byte("two")})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := q.DequeueBatch(t.Context(), "q", mq.DequeueOptions{}); err != nil || b == nil {
		t.Fatalf("dequeue: %v, %v", b, err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n := closedMessages(t, path); n != 2 {
		t.Fatalf("the copy of the closed file holds %d messages, want 2", n)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// Close while producers write and a consumer long-polls returns, every operation
// ends with an error, and the file is left whole.
func TestCloseDuringOperations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openQueue(t, path)
	var wg sync.WaitGroup
	started := make(chan struct{}, 4)
	for range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				if err := q.Enqueue(t.Context(), mq.Message{Queue: "q", Payload: []byte("m")}); err != nil {
					return
				}
				if i == 0 {
					started <- struct{}{}
				}
			}
		})
	}
	polled := make(chan error, 1)
	wg.Go(func() {
		started <- struct{}{}
		_, err := q.DequeueBatch(t.Context(), "empty", mq.DequeueOptions{Wait: time.Hour})
		polled <- err
	})
	for range 4 {
		<-started
	}
	closed := make(chan error, 1)
	go func() { closed <- q.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close during operations: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close during operations did not return in 30s")
	}
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("operations still running 30s after Close")
	}
	if err := <-polled; !errors.Is(err, mq.ErrClosed) {
		t.Fatalf("a long poll in progress at Close returned %v, want ErrClosed", err)
	}
	if n := closedMessages(t, path); n < 3 {
		t.Fatalf("the copy of the closed file holds %d messages, want at least 3 (one per producer)", n)
	}
}

// closedMessages checks that the queue's file at path was closed whole and returns
// how many messages of queue "q" a copy of the file alone holds.
func closedMessages(t *testing.T, path string) int {
	t.Helper()
	copied := sqlite.New(sqliteconntest.ClosedFile(t, path), sqlite.Options{})
	msgs, err := copied.Peek(t.Context(), "q", mq.PeekOptions{Limit: mq.MaxPeek})
	if err != nil {
		t.Fatalf("peek the copy of the closed file: %v", err)
	}
	return len(msgs)
}

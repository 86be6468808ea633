package mqtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/duroq/duroq/mq"
)

// ConcurrentEnqueuesShareCommits enqueues from many goroutines at once and checks
// that every message lands, that the calls shared transactions (rounds reports the
// backend's Enqueue rounds), and that a call whose message key is taken fails alone
// with mq.ErrDuplicateKey while the calls sharing its round succeed.
func ConcurrentEnqueuesShareCommits(t *testing.T, q mq.MessageQueue, rounds func() int64) {
	ctx := t.Context()
	if err := q.Enqueue(ctx, mq.Message{Queue: "gc", Key: "taken", Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	const callers = 64
	before := rounds()
	errs := make([]error, callers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			m := mq.Message{Queue: "gc", Payload: []byte(fmt.Sprint(i))}
			if i == callers/2 {
				m.Key = "taken"
			}
			errs[i] = q.Enqueue(context.WithoutCancel(ctx), m)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		switch {
		case i == callers/2 && !errors.Is(err, mq.ErrDuplicateKey):
			t.Errorf("Enqueue of a taken message key: %v, want ErrDuplicateKey", err)
		case i != callers/2 && err != nil:
			t.Errorf("Enqueue %d: %v", i, err)
		}
	}
	st, err := q.Stats(ctx, "gc")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != callers { // the first message and 63 of the 64
		t.Errorf("queue holds %d ready messages, want %d", st.Ready, callers)
	}
	if n := rounds() - before; n >= callers {
		t.Errorf("%d concurrent Enqueue calls took %d rounds: none shared a transaction", callers, n)
	} else {
		t.Logf("%d concurrent Enqueue calls took %d rounds", callers, n)
	}
}

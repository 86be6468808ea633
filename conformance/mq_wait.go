package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// waitCases: long polling with DequeueOptions.Wait.
var waitCases = []mqCase{
	{"WaitOnEmptyQueueReturnsNothingAfterWait", testWaitOnEmptyQueueReturnsNothingAfterWait},
	{"WaitWakesOnEnqueue", testWaitWakesOnEnqueue},
	{"WaitReturnsDelayedMessageWhenDue", testWaitReturnsDelayedMessageWhenDue},
	{"WaitReturnsMessageWhoseLockLapses", testWaitReturnsMessageWhoseLockLapses},
	{"WaitReturnsMessagesReleasedByAck", testWaitReturnsMessagesReleasedByAck},
	{"WaitReturnsMessagesReleasedByAbandon", testWaitReturnsMessagesReleasedByAbandon},
	{"WaitIgnoresIneligibleArrivals", testWaitIgnoresIneligibleArrivals},
	{"WaitEndsWhenContextIsCanceled", testWaitEndsWhenContextIsCanceled},
	{"WaitEndsAtContextDeadline", testWaitEndsAtContextDeadline},
	{"WaitEndsWhenTheQueueIsClosed", testWaitEndsWhenTheQueueIsClosed},
}

// wake is how soon after an in-process event a waiting DequeueBatch must return.
func (e env) wake() time.Duration { return max(time.Second, 2*e.lt()) }

// after runs fn in a goroutine after d and reports its error on the returned channel.
func after(d time.Duration, fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() {
		time.Sleep(d)
		ch <- fn()
	}()
	return ch
}

// waitFetch is DequeueBatch on qn that also reports how long it took.
func waitFetch(t *testing.T, q mq.MessageQueue, opts mq.DequeueOptions) (*mq.Batch, time.Duration) {
	t.Helper()
	start := time.Now()
	b := fetch(t, q, opts)
	return b, time.Since(start)
}

func wantNoErr(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	if err := <-ch; err != nil {
		t.Fatalf("%s failed: %v", what, err)
	}
}

func testWaitOnEmptyQueueReturnsNothingAfterWait(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	wait := 300 * time.Millisecond
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: wait})
	if b != nil {
		t.Fatalf("DequeueBatch on an empty queue returned %s", describe(b))
	}
	if took < wait*9/10 {
		t.Fatalf("DequeueBatch with Wait %v on an empty queue returned after %v: it must wait for Wait", wait, took)
	}
	if slack := max(300*time.Millisecond, e.lt()); took > wait+slack {
		t.Fatalf("DequeueBatch with Wait %v on an empty queue returned after %v, more than %v late", wait, took, slack)
	}
}

func testWaitWakesOnEnqueue(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	done := after(50*time.Millisecond, func() error { return q.Enqueue(t.Context(), msg("u1")) })
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 5 * time.Second})
	wantNoErr(t, done, "Enqueue")
	if b == nil {
		t.Fatalf("DequeueBatch with Wait 5s returned nothing after %v although a message was enqueued after 50ms", took)
	}
	wantPayloads(t, b, "the message enqueued during the Wait", "u1")
	if took > e.wake() {
		t.Fatalf("an Enqueue in the same process must wake a waiting DequeueBatch: it returned after %v, want under %v", took, e.wake())
	}
}

func testWaitReturnsDelayedMessageWhenDue(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	start := time.Now()
	put(t, q, mq.Message{Queue: qn, Payload: []byte("d1"), Delay: e.lt()})
	b := fetch(t, q, mq.DequeueOptions{Wait: 10 * e.lt()})
	took := time.Since(start)
	if b == nil {
		t.Fatalf("a message that became visible during the Wait was not returned (waited %v)", took)
	}
	wantPayloads(t, b, "the delayed message", "d1")
	if took < e.lt()-10*time.Millisecond { // a backend may round times to milliseconds
		t.Fatalf("the delayed message was returned %v after its enqueue, before its Delay %v passed", took, e.lt())
	}
}

func testWaitReturnsMessageWhoseLockLapses(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	put(t, q, msg("u1"))
	mustFetch(t, q, e.short(), "u1")
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 10 * e.lt()})
	if b == nil {
		t.Fatalf("a message whose lock lapsed during the Wait was not returned (waited %v)", took)
	}
	wantPayloads(t, b, "the message whose lock lapsed", "u1")
	wantAttempts(t, b, "second fetch", 2)
}

func testWaitReturnsMessagesReleasedByAck(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	held := mustFetch(t, q, mq.DequeueOptions{}, "key A")
	put(t, q, kmsg("A", "a2"))
	done := after(50*time.Millisecond, func() error { return q.Ack(t.Context(), held.Token) })
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 10 * e.wake()})
	wantNoErr(t, done, "Ack")
	if b == nil {
		t.Fatalf("a message that became eligible when its key's lock was acked during the Wait was not returned (waited %v)", took)
	}
	if took > e.wake() {
		t.Errorf("the Ack that released key A woke the waiting DequeueBatch only after %v (want within %v)", took, e.wake())
	}
	wantPayloads(t, b, "the message of the key released by the Ack", "a2")
}

func testWaitReturnsMessagesReleasedByAbandon(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	put(t, q, msg("u1"))
	held := mustFetch(t, q, mq.DequeueOptions{}, "u1")
	done := after(50*time.Millisecond, func() error { return q.Abandon(t.Context(), held.Token, mq.AbandonOptions{}) })
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 10 * e.lt()})
	wantNoErr(t, done, "Abandon")
	if b == nil {
		t.Fatalf("a message abandoned during the Wait was not returned (waited %v)", took)
	}
	wantPayloads(t, b, "the abandoned message", "u1")
}

func testWaitIgnoresIneligibleArrivals(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	mustFetch(t, q, mq.DequeueOptions{LockTimeout: long}, "key A")
	done := after(50*time.Millisecond, func() error {
		return q.Enqueue(t.Context(), tmsg("gpu", "g1"), kmsg("A", "a2"), mq.Message{Queue: "other", Payload: []byte("o1")})
	})
	wait := 3 * e.lt()
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: wait, Tags: mq.DefaultOnly()})
	wantNoErr(t, done, "Enqueue")
	if b != nil {
		t.Fatalf("a waiting DefaultOnly consumer received %s: a gpu message, a message of a locked key and a message of another queue are not eligible", describe(b))
	}
	if took < wait*9/10 {
		t.Fatalf("DequeueBatch with Wait %v returned nothing after only %v: an ineligible arrival must not end the Wait", wait, took)
	}
}

func testWaitEndsWhenContextIsCanceled(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	b, err := q.DequeueBatch(ctx, qn, mq.DequeueOptions{Wait: 5 * time.Second})
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("DequeueBatch whose context was canceled during the Wait returned %s, %v; want context.Canceled", describe(b), err)
	}
	if took > e.wake() {
		t.Fatalf("canceling the context must end the Wait promptly: it returned after %v", took)
	}
}

func testWaitEndsAtContextDeadline(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	b, err := q.DequeueBatch(ctx, qn, mq.DequeueOptions{Wait: 5 * time.Second})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DequeueBatch whose context deadline passed during the Wait returned %s, %v; want context.DeadlineExceeded", describe(b), err)
	}
	if took > e.wake() {
		t.Fatalf("the context deadline must end the Wait promptly: it returned after %v", took)
	}
}

func testWaitEndsWhenTheQueueIsClosed(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	time.AfterFunc(50*time.Millisecond, func() { q.Close() })
	start := time.Now()
	b, err := q.DequeueBatch(t.Context(), qn, mq.DequeueOptions{Wait: 10 * e.wake()})
	took := time.Since(start)
	if !errors.Is(err, mq.ErrClosed) {
		t.Fatalf("DequeueBatch waiting while the queue was closed returned %s, %v; want ErrClosed", describe(b), err)
	}
	if took > e.wake() {
		t.Fatalf("closing the queue must end a Wait promptly: it returned after %v", took)
	}
}

package conformance

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// waitCases: long polling with DequeueOptions.Wait. A long poll waits on real timers
// and on wake-ups, so these cases take real time (they run in parallel): each makes
// its event (an Enqueue, an Ack, the clock passing the end of a delay or a lock)
// happen wakeLead after the waiting DequeueBatch started, and wants the call to return
// within wake.
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
const wake = time.Second

// wakeLead is how long after a waiting DequeueBatch starts a case makes its event
// happen, so that the call is waiting by then.
const wakeLead = 50 * time.Millisecond

// after runs fn in a goroutine after d of real time (while the case waits in a
// DequeueBatch) and reports its error on the returned channel.
func after(d time.Duration, fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() {
		time.Sleep(d)
		ch <- fn()
	}()
	return ch
}

// pastAfter moves clk past at (see mqClock.past) after d of real time, while the case
// waits in a DequeueBatch. The returned flag is set just before the clock moves: a
// batch that comes back while it is unset came before its time.
func pastAfter(d time.Duration, clk mqClock, at time.Time) *atomic.Bool {
	moving := new(atomic.Bool)
	time.AfterFunc(d, func() {
		moving.Store(true)
		clk.past(at)
	})
	return moving
}

// waitFetch is DequeueBatch on qn that also reports how long it took.
func waitFetch(t *testing.T, q mq.MessageQueue, opts mq.DequeueOptions) (*mq.Batch, time.Duration) {
	t.Helper()
	start := time.Now()
	b := fetch(t, q, opts)
	return b, time.Since(start)
}

// wantWokenBy long-polls q, whose message want is held back (held says how: "on
// a paused queue"), while release (named what) lets it go wakeLead later: the
// poll must return want after release began and within wake.
func wantWokenBy(t *testing.T, q mq.MessageQueue, held, what string, release func() error, want string) {
	t.Helper()
	releasing := new(atomic.Bool) // set just before release: a batch returned while unset came too early
	done := after(wakeLead, func() error {
		releasing.Store(true)
		return release()
	})
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 10 * wake})
	wantNoErr(t, done, what)
	if b == nil {
		t.Fatalf("a long poll %s returned nothing after %v although %s ran after %v", held, took, what, wakeLead)
	}
	if !releasing.Load() {
		t.Fatalf("a long poll %s returned %s before %s", held, describe(b), what)
	}
	wantPayloads(t, b, "the message held back "+held, want)
	if took > wake {
		t.Errorf("%s in the same process must wake a DequeueBatch waiting %s: it returned after %v, want under %v", what, held, took, wake)
	}
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
	if slack := 300 * time.Millisecond; took > wait+slack {
		t.Fatalf("DequeueBatch with Wait %v on an empty queue returned after %v, more than %v late", wait, took, slack)
	}
}

func testWaitWakesOnEnqueue(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	done := after(wakeLead, func() error { return q.Enqueue(t.Context(), msg("u1")) })
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 5 * time.Second})
	wantNoErr(t, done, "Enqueue")
	if b == nil {
		t.Fatalf("DequeueBatch with Wait 5s returned nothing after %v although a message was enqueued after %v", took, wakeLead)
	}
	wantPayloads(t, b, "the message enqueued during the Wait", "u1")
	if took > wake {
		t.Fatalf("an Enqueue in the same process must wake a waiting DequeueBatch: it returned after %v, want under %v", took, wake)
	}
}

func testWaitReturnsDelayedMessageWhenDue(t *testing.T, e env) {
	t.Parallel()
	q, clk := e.openClock(t)
	due := clk.Now().Add(lt)
	put(t, q, mq.Message{Queue: qn, Payload: []byte("d1"), Delay: lt})
	clk.justBefore(due)
	moved := pastAfter(wakeLead, clk, due)
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 10 * wake})
	if b == nil {
		t.Fatalf("a message that became visible during the Wait was not returned (waited %v; the clock passed its Delay after %v)", took, wakeLead)
	}
	if !moved.Load() {
		t.Fatalf("the waiting DequeueBatch returned %s before the clock reached the end of its Delay", describe(b))
	}
	wantPayloads(t, b, "the delayed message", "d1")
	if took > wake {
		t.Errorf("a delayed message that becomes visible must wake a waiting DequeueBatch: it returned after %v, the clock passed its Delay after %v; want within %v",
			took, wakeLead, wake)
	}
}

func testWaitReturnsMessageWhoseLockLapses(t *testing.T, e env) {
	t.Parallel()
	q, clk := e.openClock(t)
	put(t, q, msg("u1"))
	held := mustFetch(t, q, short, "u1")
	clk.justBefore(held.LockedUntil)
	moved := pastAfter(wakeLead, clk, held.LockedUntil)
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 10 * wake})
	if b == nil {
		t.Fatalf("a message whose lock lapsed during the Wait was not returned (waited %v; the clock passed the lock after %v)", took, wakeLead)
	}
	if !moved.Load() {
		t.Fatalf("the waiting DequeueBatch returned %s before the clock reached the end of its lock", describe(b))
	}
	wantPayloads(t, b, "the message whose lock lapsed", "u1")
	wantAttempts(t, b, "second fetch", 2)
	if took > wake {
		t.Errorf("a message whose lock lapses becomes visible and must wake a waiting DequeueBatch: it returned after %v, the clock passed the lock after %v; want within %v",
			took, wakeLead, wake)
	}
}

func testWaitReturnsMessagesReleasedByAck(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	held := mustFetch(t, q, mq.DequeueOptions{}, "key A")
	put(t, q, kmsg("A", "a2"))
	done := after(wakeLead, func() error { return q.Ack(t.Context(), held.Token) })
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 10 * wake})
	wantNoErr(t, done, "Ack")
	if b == nil {
		t.Fatalf("a message that became eligible when its key's lock was acked during the Wait was not returned (waited %v)", took)
	}
	if took > wake {
		t.Errorf("the Ack that released key A woke the waiting DequeueBatch only after %v (want within %v)", took, wake)
	}
	wantPayloads(t, b, "the message of the key released by the Ack", "a2")
}

func testWaitReturnsMessagesReleasedByAbandon(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	put(t, q, msg("u1"))
	held := mustFetch(t, q, mq.DequeueOptions{}, "u1")
	done := after(wakeLead, func() error { return q.Abandon(t.Context(), held.Token, mq.AbandonOptions{}) })
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: 10 * wake})
	wantNoErr(t, done, "Abandon")
	if b == nil {
		t.Fatalf("a message abandoned during the Wait was not returned (waited %v)", took)
	}
	wantPayloads(t, b, "the abandoned message", "u1")
	if took > wake {
		t.Errorf("the Abandon that released u1 woke the waiting DequeueBatch only after %v (want within %v)", took, wake)
	}
}

func testWaitIgnoresIneligibleArrivals(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	mustFetch(t, q, mq.DequeueOptions{LockTimeout: long}, "key A")
	var arrived time.Time // when the Enqueue returned; read after done delivered its error
	done := after(wakeLead, func() error {
		err := q.Enqueue(t.Context(), tmsg("gpu", "g1"), kmsg("A", "a2"), mq.Message{Queue: "other", Payload: []byte("o1")})
		arrived = time.Now()
		return err
	})
	wait := 600 * time.Millisecond
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: wait, Tags: mq.DefaultOnly()})
	ended := time.Now()
	wantNoErr(t, done, "Enqueue")
	if b != nil {
		t.Fatalf("a waiting DefaultOnly consumer received %s: a gpu message, a message of a locked key and a message of another queue are not eligible", describe(b))
	}
	if took < wait*9/10 {
		t.Fatalf("DequeueBatch with Wait %v returned nothing after only %v: an ineligible arrival must not end the Wait", wait, took)
	}
	if !arrived.Before(ended) {
		inconclusive(t, "the ineligible messages arrived after the Wait had ended")
	}
}

func testWaitEndsWhenContextIsCanceled(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(wakeLead, cancel)
	start := time.Now()
	b, err := q.DequeueBatch(ctx, qn, mq.DequeueOptions{Wait: 5 * time.Second})
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("DequeueBatch whose context was canceled during the Wait returned %s, %v; want context.Canceled", describe(b), err)
	}
	if took > wake {
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
	if took > wake {
		t.Fatalf("the context deadline must end the Wait promptly: it returned after %v", took)
	}
}

func testWaitEndsWhenTheQueueIsClosed(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	time.AfterFunc(wakeLead, func() { q.Close() })
	start := time.Now()
	b, err := q.DequeueBatch(t.Context(), qn, mq.DequeueOptions{Wait: 10 * wake})
	took := time.Since(start)
	if !errors.Is(err, mq.ErrClosed) {
		t.Fatalf("DequeueBatch waiting while the queue was closed returned %s, %v; want ErrClosed", describe(b), err)
	}
	if took > wake {
		t.Fatalf("closing the queue must end a Wait promptly: it returned after %v", took)
	}
}

package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/txn"
)

// pauseCases: Admin.Pause and Resume. A paused queue delivers nothing, whatever
// else goes on: producers enqueue, holders settle their batches, operators peek,
// redrive and purge; Resume delivers in the order the pause held back and wakes the
// waiting long polls.
var pauseCases = []mqCase{
	{"PausedQueueDeliversNothingWhileItTakesMessages", testPausedQueueDeliversNothingWhileItTakesMessages},
	{"PauseLeavesOtherQueuesAlone", testPauseLeavesOtherQueuesAlone},
	{"PausedQueueSettlesHeldBatches", testPausedQueueSettlesHeldBatches},
	{"ResumeDeliversInTheOriginalOrder", testResumeDeliversInTheOriginalOrder},
	{"QueuesAndStatsReportThePause", testQueuesAndStatsReportThePause},
	{"PauseAndResumeAreIdempotent", testPauseAndResumeAreIdempotent},
	{"PauseAndResumeRejectBadInput", testPauseAndResumeRejectBadInput},
	{"WaitOnAPausedQueueIsWokenByResume", testWaitOnAPausedQueueIsWokenByResume},
	{"WaitSeesAPauseThatBeginsDuringIt", testWaitSeesAPauseThatBeginsDuringIt},
}

// pause pauses queue and fails the test on error.
func pause(t *testing.T, a mq.Admin, queue string) {
	t.Helper()
	if err := a.Pause(t.Context(), queue); err != nil {
		t.Fatalf("Pause(%q) failed: %v", queue, err)
	}
}

// resume resumes queue and fails the test on error.
func resume(t *testing.T, a mq.Admin, queue string) {
	t.Helper()
	if err := a.Resume(t.Context(), queue); err != nil {
		t.Fatalf("Resume(%q) failed: %v", queue, err)
	}
}

// wantNoBatches fails if DequeueBatches of qn, or its QueueTx twin when q is an
// mq.TxQueue, returns a batch.
func wantNoBatches(t *testing.T, q mq.MessageQueue, rule string) {
	t.Helper()
	bs, err := q.DequeueBatches(t.Context(), qn, mq.DequeueOptions{}, 4)
	if err != nil || len(bs) > 0 {
		t.Fatalf("%s: DequeueBatches = %d batches, %v; want none, nil", rule, len(bs), err)
	}
	tq, ok := q.(mq.TxQueue)
	if !ok {
		return
	}
	err = tq.Database().Run(t.Context(), func(ctx context.Context, tx txn.Tx) error {
		qt, err := tq.In(tx)
		if err != nil {
			return err
		}
		bs, err = qt.DequeueBatches(ctx, qn, mq.DequeueOptions{}, 4)
		return err
	})
	if err != nil || len(bs) > 0 {
		t.Fatalf("%s: QueueTx.DequeueBatches = %d batches, %v; want none, nil", rule, len(bs), err)
	}
}

func testPausedQueueDeliversNothingWhileItTakesMessages(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("dead"))
	deadLetter(t, q, "bad")
	put(t, q, msg("u1"), kmsg("A", "a1"))
	pause(t, a, qn)
	const rule = "a paused queue delivers nothing"
	mustFetchNothing(t, q, mq.DequeueOptions{}, rule)
	mustFetchNothing(t, q, withSession(ownerA, long), rule+" (to a session owner)")
	wantNoBatches(t, q, rule)

	put(t, q, msg("u2"), kmsg("A", "a2"))
	redrive(t, a, mq.RedriveOptions{}, 1, "Redrive into a paused queue")
	if got := infoPayloads(peekAll(t, a, qn, mq.PeekOptions{})); !equalStrings(got, []string{"dead", "u1", "a1", "u2", "a2"}) {
		t.Fatalf("Peek of the paused queue = %q; want every message enqueued or redriven into it", got)
	}
	wantStats(t, q, qn, mq.Stats{Ready: 5, Paused: true}, "Stats of the paused queue")
	purge(t, a, qn, mq.PurgeOptions{RoutingKey: "A"}, 2, "Purge of a paused queue's key")
	mustFetchNothing(t, q, mq.DequeueOptions{}, rule+" after Enqueue, Redrive and Purge")

	resume(t, a, qn)
	for _, p := range []string{"dead", "u1", "u2"} {
		wantAttempts(t, fetchPayloads(t, q, mq.DequeueOptions{}, "after Resume", p), "the pause fetched nothing", 1)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "every message was delivered once")
}

func testPauseLeavesOtherQueuesAlone(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("u1"), mq.Message{Queue: "other", Payload: []byte("o1")}, mq.Message{Queue: "other", RoutingKey: "A", Payload: []byte("o2")})
	pause(t, a, qn)
	if b := fetchFrom(t, q, "other", mq.DequeueOptions{}); b == nil || payloads(b)[0] != "o1" {
		t.Fatalf("pausing %q stopped queue other: got %s, want o1", qn, describe(b))
	}
	bs, err := q.DequeueBatches(t.Context(), "other", mq.DequeueOptions{}, 4)
	if err != nil || len(bs) != 1 || payloads(bs[0])[0] != "o2" {
		t.Fatalf("DequeueBatches of queue other while %q is paused = %d batches, %v; want o2's", qn, len(bs), err)
	}
	wantStats(t, q, "other", mq.Stats{Locked: 2}, "queue other is not paused")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the paused queue delivers nothing")
}

func testPausedQueueSettlesHeldBatches(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"), msg("u1"), msg("u2"), msg("u3"), kmsg("B", "b1"))
	held := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key A", "a1", "a2")
	u1 := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1", "u1")
	u2 := fetchPayloads(t, q, short, "u2", "u2")
	u3 := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u3", "u3")
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key B", "b1")
	pause(t, a, qn)

	const rule = "a batch held when its queue was paused"
	if li, err := q.Lock(t.Context(), held.Token); err != nil || li.Messages != 2 {
		t.Fatalf("%s: Lock = %+v, %v; want its 2 messages", rule, li, err)
	}
	if _, err := q.Renew(t.Context(), u1.Token, long); err != nil {
		t.Fatalf("%s: Renew failed: %v", rule, err)
	}
	settle(t, q, mq.Settlement{Token: held.Token, Acked: 1, DeadLettered: 1, DeadLetterQueue: "dlq", Reason: "bad", Then: []mq.Message{msg("f1")}})
	ack(t, q, u1)
	abandon(t, q, u3, mq.AbandonOptions{})
	abandon(t, q, b, mq.AbandonOptions{})
	clk.past(u2.LockedUntil)
	if err := q.Ack(t.Context(), u2.Token); err == nil {
		t.Fatalf("%s: Ack after its lock lapsed succeeded; a pause does not hold locks", rule)
	}
	if dl := fetchFrom(t, q, "dlq", mq.DequeueOptions{}); dl == nil {
		t.Fatal("the dead letter a2, in a queue that is not paused, was not delivered")
	} else {
		wantPayloads(t, dl, "the dead letter", "a2")
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "released, lapsed and follow-up messages of a paused queue wait for Resume")
	wantStats(t, q, qn, mq.Stats{Ready: 4, Paused: true}, "u3 and b1 released, u2 lapsed, f1 enqueued")

	resume(t, a, qn)
	var got []string
	for range 4 {
		got = append(got, payloads(mustFetch(t, q, mq.DequeueOptions{LockTimeout: long}, "after Resume"))...)
	}
	// u3, b1 and f1 became visible when the clock was at its start, in id order;
	// u2 when its lock lapsed.
	if want := []string{"u3", "b1", "f1", "u2"}; !equalStrings(got, want) {
		t.Fatalf("after Resume the batches hold %q, want %q (visibility, then enqueue order)", got, want)
	}
}

func testResumeDeliversInTheOriginalOrder(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	put(t, q, kmsg("A", "a1"), msg("u1"), kmsg("B", "b1"))
	pause(t, a, qn)
	due := clk.Now().Add(lt)
	put(t, q, kmsg("A", "a2"), mq.Message{Queue: qn, Payload: []byte("d1"), Delay: lt}, msg("u2"), kmsg("B", "b2"))
	clk.past(due)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a delayed message that comes due in a paused queue waits for Resume")
	resume(t, a, qn)
	const rule = "Resume delivers in eligibility order, each key's messages in one batch"
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, rule, "a1", "a2")
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, rule, "u1")
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, rule, "b1", "b2")
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, rule, "u2")
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, rule, "d1")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "every message was delivered once")
}

func testQueuesAndStatsReportThePause(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	list := func(rule string, want ...string) map[string]mq.QueueStats {
		t.Helper()
		got, err := a.Queues(t.Context())
		if err != nil {
			t.Fatalf("Queues failed: %v", err)
		}
		var names []string
		byName := map[string]mq.QueueStats{}
		for _, qs := range got {
			names = append(names, qs.Queue)
			byName[qs.Queue] = qs
			if st, err := q.Stats(t.Context(), qs.Queue); err != nil || st != qs.Stats {
				t.Fatalf("Queues lists %q with %+v; Stats says %+v, %v", qs.Queue, qs.Stats, st, err)
			}
		}
		if !equalStrings(names, want) {
			t.Fatalf("%s: Queues lists %q, want %q", rule, names, want)
		}
		return byName
	}
	put(t, q, kmsg("A", "a1"), mq.Message{Queue: "other", Payload: []byte("o1")})
	pause(t, a, qn)
	pause(t, a, "idle")
	wantStats(t, q, qn, mq.Stats{Ready: 1, Paused: true}, "a paused queue")
	wantStats(t, q, "idle", mq.Stats{Paused: true}, "a paused queue without messages")
	wantStats(t, q, "other", mq.Stats{Ready: 1}, "a queue that is not paused")
	if st, err := q.KeyStats(t.Context(), qn, "A"); err != nil || !st.Paused || st.Ready != 1 {
		t.Fatalf("KeyStats of a key of the paused queue = %+v, %v; want 1 ready and Paused", st, err)
	}
	got := list("a paused queue is listed even without messages", qn, "idle", "other")
	if !got[qn].Paused || !got["idle"].Paused || got["other"].Paused {
		t.Fatalf("Queues = %+v; want %s and idle paused, other not", got, qn)
	}
	resume(t, a, "idle")
	resume(t, a, qn)
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "a resumed queue")
	list("a resumed queue without messages is not listed", qn, "other")
}

func testPauseAndResumeAreIdempotent(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("u1"), msg("u2"))
	resume(t, a, qn)
	resume(t, a, "never-used")
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "resuming a queue that is not paused does nothing")
	ack(t, q, fetchPayloads(t, q, mq.DequeueOptions{}, "a queue that was never paused delivers", "u1"))
	pause(t, a, qn)
	pause(t, a, qn)
	wantStats(t, q, qn, mq.Stats{Ready: 1, Paused: true}, "pausing twice")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a queue paused twice delivers nothing")
	resume(t, a, qn)
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "one Resume ends the pause, however many Pause calls began it")
	resume(t, a, qn)
	fetchPayloads(t, q, mq.DequeueOptions{}, "a resumed queue delivers", "u2")
}

func testPauseAndResumeRejectBadInput(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("u1"))
	for _, name := range []string{"", strings.Repeat("q", mq.MaxNameSize+1), "bad\xff", "nul\x00"} {
		for op, fn := range map[string]func(context.Context, string) error{"pause": a.Pause, "resume": a.Resume} {
			err := call(t, op, func() error { return fn(t.Context(), name) })
			wantErr(t, err, mq.ErrInvalid, op, "an invalid queue name")
			wantShort(t, err, op+" with an invalid queue name")
		}
	}
	for op, fn := range map[string]func(context.Context, string) error{"Pause": a.Pause, "Resume": a.Resume} {
		err := call(t, op, func() error { return fn(canceledCtx(t), qn) })
		wantErrIs(t, err, context.Canceled, op, "a call with a canceled context must return the context's error")
	}
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "the rejected calls paused nothing")
	list, err := a.Queues(t.Context())
	if err != nil || len(list) != 1 || list[0].Queue != qn || list[0].Paused {
		t.Fatalf("Queues after the rejected calls = %+v, %v; want %s alone, not paused", list, err, qn)
	}
	pause(t, a, qn)
	if err := a.Resume(canceledCtx(t), qn); err == nil {
		t.Fatal("Resume with a canceled context succeeded")
	}
	wantStats(t, q, qn, mq.Stats{Ready: 1, Paused: true}, "a Resume that failed with a canceled context changes nothing")

	if err := q.Close(); err != nil {
		t.Fatalf("Close failed: %v", err)
	}
	for op, fn := range map[string]func(context.Context, string) error{"pause": a.Pause, "resume": a.Resume} {
		wantErr(t, call(t, op, func() error { return fn(t.Context(), qn) }), mq.ErrClosed, op, "a call after Close")
	}
}

func testWaitOnAPausedQueueIsWokenByResume(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("u1"))
	pause(t, a, qn)
	wantWokenBy(t, q, "on a paused queue", "Resume", func() error { return a.Resume(t.Context(), qn) }, "u1")
}

func testWaitSeesAPauseThatBeginsDuringIt(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	a := asAdmin(t, q)
	var arrived time.Time // when the Enqueue returned; read after done delivered its error
	done := after(wakeLead, func() error {
		if err := a.Pause(t.Context(), qn); err != nil {
			return err
		}
		err := q.Enqueue(t.Context(), msg("u1"))
		arrived = time.Now()
		return err
	})
	wait := 600 * time.Millisecond
	b, took := waitFetch(t, q, mq.DequeueOptions{Wait: wait})
	ended := time.Now()
	wantNoErr(t, done, "Pause and Enqueue")
	if b != nil {
		t.Fatalf("a long poll received %s, enqueued after its queue was paused", describe(b))
	}
	if took < wait*9/10 {
		t.Fatalf("DequeueBatch with Wait %v returned nothing after only %v: an Enqueue into a paused queue must not end the Wait", wait, took)
	}
	if !arrived.Before(ended) {
		inconclusive(t, "the Enqueue into the paused queue came after the Wait had ended")
	}
	resume(t, a, qn)
	fetchPayloads(t, q, mq.DequeueOptions{}, "after Resume", "u1")
}

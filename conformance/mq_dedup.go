package conformance

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// dedupCases: a message's DedupID is remembered for its DedupWindow after the
// message was accepted, acked or not; a duplicate inside the window is answered as
// accepted and stores nothing (issue 20).
var dedupCases = []mqCase{
	{"DedupDuplicateInsideTheWindowStoresNothing", testDedupDuplicateStoresNothing},
	{"DedupIDOutlivesItsMessagesAck", testDedupOutlivesAck},
	{"DedupWindowDefaultsAndEnds", testDedupWindowDefaultsAndEnds},
	{"DedupFirstOfACallWinsAndQueuesAreApart", testDedupFirstWinsQueuesApart},
	{"DedupAppliesToFollowUpMessages", testDedupFollowUps},
	{"DedupRejectedEnqueueRemembersNothing", testDedupRejectedEnqueueRemembersNothing},
	{"DedupConcurrentDuplicatesStoreOne", testDedupConcurrent},
	{"DedupInvalidInputIsRejected", testDedupInvalid},
}

// dmsg is a message of qn with payload p and DedupID id.
func dmsg(id, p string) mq.Message { return mq.Message{Queue: qn, Payload: []byte(p), DedupID: id} }

// drainPayloads takes and acks every visible message of qn, and returns their
// payloads in delivery order.
func drainPayloads(t *testing.T, q mq.MessageQueue) []string {
	t.Helper()
	var got []string
	for {
		b := fetch(t, q, mq.DequeueOptions{})
		if b == nil {
			return got
		}
		got = append(got, payloads(b)...)
		if err := q.Ack(t.Context(), b.Token); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
}

func wantDrained(t *testing.T, q mq.MessageQueue, rule string, want ...string) {
	t.Helper()
	if got := drainPayloads(t, q); !equalStrings(got, want) {
		t.Fatalf("%s: the queue delivered %q, want %q", rule, got, want)
	}
}

func testDedupDuplicateStoresNothing(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, dmsg("order-1", "first"))
	clk.Advance(time.Minute)
	// A duplicate is accepted: no error for the caller to special-case.
	put(t, q, dmsg("order-1", "again"), msg("plain"))
	if st := stats(t, q, qn); st.Ready != 2 {
		t.Fatalf("after a duplicate, Stats = %+v, want 2 ready (first and plain)", st)
	}
	wantDrained(t, q, "a duplicate inside the window", "first", "plain")
}

func testDedupOutlivesAck(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, dmsg("order-1", "first"))
	wantDrained(t, q, "the first delivery", "first")
	clk.Advance(4 * time.Minute)
	put(t, q, dmsg("order-1", "after the ack"))
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a DedupID is remembered after its message was acked")
}

func testDedupWindowDefaultsAndEnds(t *testing.T, e env) {
	q, clk := e.openClock(t)
	long := dmsg("long", "long-1")
	long.DedupWindow = time.Hour
	put(t, q, dmsg("default", "default-1"), long)
	wantDrained(t, q, "the first messages", "default-1", "long-1")
	clk.Advance(mq.DefaultDedupWindow - time.Second)
	put(t, q, dmsg("default", "default-2"))
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a second before DefaultDedupWindow ends the id is still remembered")
	clk.Advance(2 * time.Second)
	long2 := dmsg("long", "long-2")
	long2.DedupWindow = time.Hour
	put(t, q, dmsg("default", "default-3"), long2)
	wantDrained(t, q, "once DefaultDedupWindow has passed the id is forgotten (the 1-hour one is not)", "default-3")
	clk.Advance(time.Hour)
	put(t, q, long2)
	wantDrained(t, q, "once its own window has passed", "long-2")
	// A re-accepted id starts a new window.
	clk.Advance(time.Minute)
	put(t, q, long2)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "an id accepted again is remembered for a new window")
}

func testDedupFirstWinsQueuesApart(t *testing.T, e env) {
	q := e.open(t)
	other := mq.Message{Queue: "other", Payload: []byte("other queue"), DedupID: "x"}
	put(t, q, dmsg("x", "x-1"), dmsg("y", "y-1"), dmsg("x", "x-2"), other, msg("plain"))
	wantDrained(t, q, "the first of a DedupID in one call wins", "x-1", "y-1", "plain")
	if b := fetchFrom(t, q, "other", mq.DequeueOptions{}); b == nil || string(b.Messages[0].Payload) != "other queue" {
		t.Fatalf("the same DedupID on another queue is another id: got %s", describe(b))
	}
}

func testDedupFollowUps(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, dmsg("step-2", "queued"), msg("a"), msg("b"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "first", "queued")
	if err := q.Ack(t.Context(), b.Token); err != nil {
		t.Fatal(err)
	}
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "second", "a")
	if err := q.Ack(t.Context(), b.Token, dmsg("step-2", "ack follow-up")); err != nil {
		t.Fatalf("Ack with a duplicate follow-up: %v", err)
	}
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "third", "b")
	settle(t, q, mq.Settlement{Token: b.Token, Acked: 1, Then: []mq.Message{dmsg("step-3", "settle follow-up"), dmsg("step-3", "repeat")}})
	wantDrained(t, q, "follow-ups are deduplicated as enqueues are", "settle follow-up")
}

func testDedupRejectedEnqueueRemembersNothing(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, mq.Message{Queue: qn, Payload: []byte("keyed"), Key: "k"})
	dup := mq.Message{Queue: qn, Payload: []byte("clash"), Key: "k"}
	err := q.Enqueue(t.Context(), dmsg("fresh", "with the clash"), dup)
	if !errors.Is(err, mq.ErrDuplicateKey) {
		t.Fatalf("Enqueue with a pending message key = %v, want ErrDuplicateKey", err)
	}
	put(t, q, dmsg("fresh", "retried"))
	wantDrained(t, q, "an Enqueue that failed remembered none of its DedupIDs", "keyed", "retried")
}

func testDedupConcurrent(t *testing.T, e env) {
	q := e.open(t)
	const callers = 8
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() { errs <- q.Enqueue(t.Context(), dmsg("once", fmt.Sprintf("caller-%d", i))) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a concurrent Enqueue of one DedupID failed: %v", err)
		}
	}
	if got := drainPayloads(t, q); len(got) != 1 {
		t.Fatalf("%d concurrent Enqueues of one DedupID stored %q, want exactly one", callers, got)
	}
}

func testDedupInvalid(t *testing.T, e env) {
	q := e.open(t)
	for _, c := range []struct {
		rule  string
		m     mq.Message
		field string
	}{
		{"a DedupID over MaxNameSize", dmsg(strings.Repeat("d", mq.MaxNameSize+1), "x"), "DedupID"},
		{"a negative DedupWindow", mq.Message{Queue: qn, DedupID: "d", DedupWindow: -time.Second}, "DedupWindow"},
		{"a DedupWindow beyond MaxDedupWindow", mq.Message{Queue: qn, DedupID: "d", DedupWindow: mq.MaxDedupWindow + time.Hour}, "DedupWindow"},
		{"a DedupWindow without a DedupID", mq.Message{Queue: qn, DedupWindow: time.Minute}, "DedupWindow"},
	} {
		err := q.Enqueue(t.Context(), c.m)
		wantInvalid(t, err, "enqueue", c.rule, c.field)
		if err != nil && len(err.Error()) > 3000 {
			t.Errorf("%s: the error is %d bytes long; errors never echo unbounded input", c.rule, len(err.Error()))
		}
	}
	put(t, q, dmsg("d", "valid"))
	wantDrained(t, q, "the rejected messages remembered nothing", "valid")
}

package conformance

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// batchCases: routing-key batches, un-keyed delivery, queue isolation, metadata.
var batchCases = []mqCase{
	{"RoutingKeyBatchLocksAllVisibleMessages", testRoutingKeyBatchLocksAllVisibleMessages},
	{"RoutingKeyBatchLeavesOutDelayedMessages", testRoutingKeyBatchLeavesOutDelayedMessages},
	{"LockedKeyIsSkippedButOtherKeysAndUnkeyedFlow", testLockedKeyIsSkippedButOtherKeysAndUnkeyedFlow},
	{"MessagesArrivingDuringLockWaitForTheAck", testMessagesArrivingDuringLockWaitForTheAck},
	{"MessagesArrivingDuringLockJoinTheBatchAfterExpiry", testMessagesArrivingDuringLockJoinTheBatchAfterExpiry},
	{"UnkeyedMessagesAreDeliveredOneAtATime", testUnkeyedMessagesAreDeliveredOneAtATime},
	{"LockTokensAreUnique", testLockTokensAreUnique},
	{"RoutingKeysAreScopedToTheirQueue", testRoutingKeysAreScopedToTheirQueue},
	{"QueuesAreIsolated", testQueuesAreIsolated},
	{"StatsCountReadyDelayedLocked", testStatsCountReadyDelayedLocked},
	{"StatsNextVisibleIsTheEarliestDelayedMessage", testStatsNextVisible},
	{"StatsOldestReadyIsWhenTheLongestWaitingMessageBecameVisible", testStatsOldestReady},
	{"RoundTripPreservesPayloadAndMetadata", testRoundTripPreservesPayloadAndMetadata},
	{"IDsIncreaseInEnqueueOrder", testIDsIncreaseInEnqueueOrder},
	{"LockedUntilReflectsLockTimeout", testLockedUntilReflectsLockTimeout},
	{"EnqueueOfManyMessagesIsAtomicAndAllVisible", testEnqueueOfManyMessagesIsAtomicAndAllVisible},
}

// orderCases: FIFO order and delayed visibility.
var orderCases = []mqCase{
	{"FIFOFollowsEnqueueOrder", testFIFOFollowsEnqueueOrder},
	{"FIFOFollowsVisibilityThenEnqueueOrder", testFIFOFollowsVisibilityThenEnqueueOrder},
	{"DelayedMessageIsInvisibleUntilDue", testDelayedMessageIsInvisibleUntilDue},
}

func testRoutingKeyBatchLocksAllVisibleMessages(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), kmsg("B", "b1"))
	put(t, q, kmsg("A", "a2"), msg("u1"))
	put(t, q, kmsg("A", "a3"), kmsg("B", "b2"))

	a := fetchPayloads(t, q, mq.DequeueOptions{},
		"the oldest message's key A must come with every visible message of A, in enqueue order", "a1", "a2", "a3")
	if a.RoutingKey != "A" {
		t.Fatalf("the batch of key A reports RoutingKey %q", a.RoutingKey)
	}
	wantAttempts(t, a, "first fetch", 1, 1, 1)
	if a.MaxAttempt() != 1 {
		t.Errorf("MaxAttempt of a first fetch is %d, want 1", a.MaxAttempt())
	}
	b := fetchPayloads(t, q, mq.DequeueOptions{},
		"with key A locked, the next oldest key B must come with all its visible messages", "b1", "b2")
	if b.RoutingKey != "B" {
		t.Fatalf("the batch of key B reports RoutingKey %q", b.RoutingKey)
	}
	u := fetchPayloads(t, q, mq.DequeueOptions{}, "the un-keyed message comes alone", "u1")
	if u.RoutingKey != "" {
		t.Fatalf("the batch of an un-keyed message reports RoutingKey %q", u.RoutingKey)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "every message is locked")
	if a.Token == b.Token || a.Token == u.Token || b.Token == u.Token {
		t.Fatalf("three batches share a lock token: %q, %q, %q", a.Token, b.Token, u.Token)
	}
	ack(t, q, a)
	ack(t, q, b)
	ack(t, q, u)
	wantEmpty(t, q, qn, "every batch was acked")
}

func testRoutingKeyBatchLeavesOutDelayedMessages(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("A", "a1"))
	due := clk.Now().Add(lt)
	put(t, q, mq.Message{Queue: qn, RoutingKey: "A", Payload: []byte("a2"), Delay: lt})

	clk.justBefore(due)
	b := mustFetch(t, q, mq.DequeueOptions{LockTimeout: long}, "a1 is visible")
	wantPayloads(t, b, "a message of the key that is not visible yet must not be part of the batch", "a1")
	clk.past(due)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a2 became visible while key A is locked: nobody may receive it until the lock ends")
	ack(t, q, b)
	got := fetchPayloads(t, q, mq.DequeueOptions{}, "a2 survives the ack of the batch it was not part of and is delivered next", "a2")
	wantAttempts(t, got, "a2 was never fetched before", 1)
}

func testLockedKeyIsSkippedButOtherKeysAndUnkeyedFlow(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"))
	a := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1", "a2")
	put(t, q, kmsg("A", "a3"), kmsg("B", "b1"), msg("u1"), kmsg("A", "a4"), kmsg("B", "b2"))

	var got []string
	for range 4 {
		b := fetch(t, q, mq.DequeueOptions{})
		if b == nil {
			break
		}
		if b.RoutingKey == "A" {
			t.Fatalf("a second consumer received %s of locked key %q", describe(b), "A")
		}
		got = append(got, payloads(b)...)
	}
	if want := []string{"b1", "b2", "u1"}; !equalStrings(got, want) {
		t.Fatalf("while key A is locked, a second consumer must get the other key and the un-keyed message in FIFO order: got %q, want %q", got, want)
	}
	ack(t, q, a)
	fetchPayloads(t, q, mq.DequeueOptions{}, "after the ack, key A's remaining messages come as one batch", "a3", "a4")
}

func testMessagesArrivingDuringLockWaitForTheAck(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1")
	put(t, q, kmsg("A", "a2"))
	put(t, q, kmsg("A", "a3"))
	mustFetchNothing(t, q, mq.DequeueOptions{}, "messages that arrive while key A is locked must not be delivered until the lock ends")
	ack(t, q, b)
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "the ack deletes exactly the batch's message, not the ones that arrived during the lock")
	got := fetchPayloads(t, q, mq.DequeueOptions{}, "the messages that arrived during the lock are delivered next, in order", "a2", "a3")
	wantAttempts(t, got, "messages that arrived during a lock were never fetched", 1, 1)
}

func testMessagesArrivingDuringLockJoinTheBatchAfterExpiry(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("A", "a1"))
	old := fetchPayloads(t, q, short, "key A", "a1")
	clk.Advance(lt / 2)
	put(t, q, kmsg("A", "a2"), kmsg("A", "a3"), kmsg("A", "a4"))
	clk.justBefore(old.LockedUntil)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "messages that arrive while key A is locked must not be delivered until the lock ends")
	clk.past(old.LockedUntil)
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long},
		"after the lock lapses, the key's batch holds the old and the new messages in enqueue order", "a1", "a2", "a3", "a4")
	wantAttempts(t, b, "a1 was fetched once before, the others never", 2, 1, 1, 1)
	if b.MaxAttempt() != 2 {
		t.Errorf("MaxAttempt of %s is %d, want 2", describe(b), b.MaxAttempt())
	}
	if b.Token == old.Token {
		t.Errorf("the batch fetched after the lock lapsed reuses the old token %q", old.Token)
	}
}

func testUnkeyedMessagesAreDeliveredOneAtATime(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"), msg("u2"), msg("u3"))
	var bs []*mq.Batch
	for _, p := range []string{"u1", "u2", "u3"} {
		b := fetchPayloads(t, q, mq.DequeueOptions{}, "un-keyed messages come one per batch, in FIFO order", p)
		if b.RoutingKey != "" {
			t.Fatalf("the batch of an un-keyed message reports RoutingKey %q", b.RoutingKey)
		}
		bs = append(bs, b)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "all three un-keyed messages are locked")
	if bs[0].Token == bs[1].Token || bs[1].Token == bs[2].Token || bs[0].Token == bs[2].Token {
		t.Fatalf("un-keyed batches share a lock token")
	}
	// Each message is independent: acking one and abandoning another leaves the third held.
	ack(t, q, bs[1])
	abandon(t, q, bs[0], mq.AbandonOptions{})
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "the abandoned un-keyed message is fetchable again", "u1")
	wantAttempts(t, b, "second fetch of u1", 2)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "u3 is still locked and u2 was acked")
	ack(t, q, bs[2])
	ack(t, q, b)
	wantEmpty(t, q, qn, "every message was acked")
}

func testLockTokensAreUnique(t *testing.T, e env) {
	q := e.open(t)
	for i := range 5 {
		put(t, q, kmsg(fmt.Sprintf("key-%d", i), "k"), msg("u"))
	}
	seen := map[string]bool{}
	var bs []*mq.Batch
	for range 10 {
		b := mustFetch(t, q, mq.DequeueOptions{}, "five keys and five un-keyed messages give ten batches")
		if seen[b.Token] {
			t.Fatalf("lock token %q was handed out twice", b.Token)
		}
		seen[b.Token] = true
		bs = append(bs, b)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "all ten batches are locked")
	for _, b := range bs {
		abandon(t, q, b, mq.AbandonOptions{})
	}
	for range 10 {
		b := mustFetch(t, q, mq.DequeueOptions{}, "abandoned batches are fetchable again")
		if seen[b.Token] {
			t.Fatalf("a refetched batch reuses lock token %q", b.Token)
		}
		seen[b.Token] = true
	}
}

func testRoutingKeysAreScopedToTheirQueue(t *testing.T, e env) {
	q := e.open(t)
	put(t, q,
		mq.Message{Queue: "q1", RoutingKey: "A", Payload: []byte("x1")},
		mq.Message{Queue: "q2", RoutingKey: "A", Payload: []byte("y1")},
		mq.Message{Queue: "q1", RoutingKey: "A", Payload: []byte("x2")},
	)
	b1 := fetchFrom(t, q, "q1", mq.DequeueOptions{})
	if b1 == nil {
		t.Fatal("queue q1 has messages but DequeueBatch returned nothing")
	}
	wantPayloads(t, b1, "a batch holds only the key's messages of its own queue", "x1", "x2")
	b2 := fetchFrom(t, q, "q2", mq.DequeueOptions{})
	if b2 == nil {
		t.Fatal("locking key A in queue q1 must not lock key A in queue q2")
	}
	wantPayloads(t, b2, "key A of queue q2", "y1")
}

func testQueuesAreIsolated(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, mq.Message{Queue: "q1", Payload: []byte("x")}, mq.Message{Queue: "q1", RoutingKey: "A", Payload: []byte("y")},
		mq.Message{Queue: "q1", Payload: []byte("z"), Delay: long})
	if b := fetchFrom(t, q, "q2", mq.DequeueOptions{}); b != nil {
		t.Fatalf("queue q2 is empty but DequeueBatch returned %s from it", describe(b))
	}
	wantStats(t, q, "q2", mq.Stats{}, "queue q2 is empty")
	wantStats(t, q, "q1", mq.Stats{Ready: 2, Delayed: 1}, "queue q1 holds two ready and one delayed message")
	if n, err := q.Remove(t.Context(), "q2", "anything"); err != nil || n != 0 {
		t.Fatalf("Remove on the empty queue q2 = %d, %v; want 0, nil", n, err)
	}
}

func testStatsCountReadyDelayedLocked(t *testing.T, e env) {
	q, clk := e.openClock(t)
	wantEmpty(t, q, qn, "a fresh queue is empty")
	put(t, q, kmsg("A", "a1"))
	a := mustFetch(t, q, short, "key A")
	put(t, q, kmsg("A", "a2"), msg("u1"), mq.Message{Queue: qn, Payload: []byte("d1"), Delay: long})
	clk.justBefore(a.LockedUntil)
	wantStats(t, q, qn, mq.Stats{Ready: 2, Delayed: 1, Locked: 1},
		"a2 (a message of a locked key counts as ready) and u1 are ready, d1 is delayed, a1 is locked")
	clk.past(a.LockedUntil)
	wantStats(t, q, qn, mq.Stats{Ready: 3, Delayed: 1}, "a message whose lock lapsed is ready again, not locked")
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key A", "a1", "a2")
	wantStats(t, q, qn, mq.Stats{Ready: 1, Delayed: 1, Locked: 2}, "a1 and a2 are locked")
	abandon(t, q, b, mq.AbandonOptions{Delay: long})
	wantStats(t, q, qn, mq.Stats{Ready: 1, Delayed: 3}, "messages abandoned with a delay are delayed")
}

func testStatsNextVisible(t *testing.T, e env) {
	q, clk := e.openClock(t)
	st, err := q.Stats(t.Context(), qn)
	if err != nil || !st.NextVisible.IsZero() {
		t.Fatalf("Stats of an empty queue = %+v, %v; want no NextVisible", st, err)
	}
	put(t, q, msg("u1"))
	enqueued := clk.Now()
	put(t, q, mq.Message{Queue: qn, Payload: []byte("d2"), Delay: 2 * long}, mq.Message{Queue: qn, Payload: []byte("d1"), Delay: long})
	clk.Advance(time.Second)
	if st, err = q.Stats(t.Context(), qn); err != nil {
		t.Fatal(err)
	}
	wantTime(t, st.NextVisible, enqueued.Add(long), "NextVisible (d1's visibility; u1 is ready, d2 comes later)")
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: 3 * long}, "u1", "u1")
	st, _ = q.Stats(t.Context(), qn)
	wantTime(t, st.NextVisible, enqueued.Add(long), "NextVisible while u1 is locked until later (still d1's: a lock's expiry is not a delayed message's visibility)")
	abandoned := clk.Now()
	abandon(t, q, b, mq.AbandonOptions{Delay: long / 2})
	st, _ = q.Stats(t.Context(), qn)
	wantTime(t, st.NextVisible, abandoned.Add(long/2), "NextVisible after u1 was abandoned with a Delay of 30s (u1's)")
}

func testStatsOldestReady(t *testing.T, e env) {
	q, clk := e.openClock(t)
	oldest := func() time.Time {
		t.Helper()
		st, err := q.Stats(t.Context(), qn)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		return st.OldestReady
	}
	if got := oldest(); !got.IsZero() {
		t.Fatalf("OldestReady of an empty queue = %v, want zero", got)
	}
	put(t, q, mq.Message{Queue: qn, Payload: []byte("d1"), Delay: long})
	if got := oldest(); !got.IsZero() {
		t.Fatalf("OldestReady with only a delayed message = %v, want zero", got)
	}
	clk.Advance(time.Second)
	first := clk.Now()
	put(t, q, msg("u1"))
	clk.Advance(time.Second)
	put(t, q, kmsg("A", "a1"))
	clk.Advance(time.Second)
	wantTime(t, oldest(), first, "OldestReady is u1's enqueue (d1 is still delayed, a1 came later)")
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: 10 * time.Second}, "u1", "u1")
	wantTime(t, oldest(), first.Add(time.Second), "OldestReady while u1 is locked is a1's enqueue")
	clk.Advance(20 * time.Second) // u1's lock lapses 10s after its fetch: ready again from then
	wantTime(t, oldest(), first.Add(time.Second), "OldestReady stays a1's: it has waited longer than u1 since its lock lapsed")
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key A", "a1")
	wantTime(t, oldest(), first.Add(12*time.Second), "OldestReady after a1 was taken is when u1's lock lapsed")
	b = fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1 again", "u1")
	if got := oldest(); !got.IsZero() {
		t.Fatalf("OldestReady with every visible message locked = %v, want zero", got)
	}
	clk.Advance(40 * time.Second) // d1 became visible, u1 is still locked
	wantTime(t, oldest(), first.Add(-time.Second).Add(long), "OldestReady once d1's delay ended is d1's visibility")
	abandon(t, q, b, mq.AbandonOptions{})
	wantTime(t, oldest(), first.Add(-time.Second).Add(long), "OldestReady after u1 was released at once is still d1's, the earlier")
}

func testRoundTripPreservesPayloadAndMetadata(t *testing.T, e env) {
	q, clk := e.openClock(t)
	binary := []byte{0, 1, 2, 0xfe, 0xff, 'x', 0, '\n'}
	enqueued := clk.Now()
	put(t, q,
		mq.Message{Queue: qn, RoutingKey: "rk", Payload: binary, Tag: "gpu", Key: "key-1"},
		mq.Message{Queue: qn, Payload: []byte("in a session"), Tag: "t2", Session: "sess-1", Key: "key-2"},
	)
	clk.Advance(time.Second) // EnqueuedAt is when the message was enqueued, not fetched

	b := mustFetch(t, q, mq.DequeueOptions{}, "the keyed message")
	if b.RoutingKey != "rk" || b.Queue != qn || len(b.Messages) != 1 {
		t.Fatalf("got %s from queue %q, want the single message of key %q", describe(b), b.Queue, "rk")
	}
	d := b.Messages[0]
	if !bytes.Equal(d.Payload, binary) {
		t.Errorf("Payload = %v, want the enqueued bytes %v", d.Payload, binary)
	}
	if d.Tag != "gpu" || d.Key != "key-1" || d.Session != "" || d.Attempt != 1 {
		t.Errorf("delivery has Tag %q Key %q Session %q Attempt %d, want \"gpu\" \"key-1\" \"\" 1", d.Tag, d.Key, d.Session, d.Attempt)
	}
	wantTime(t, d.EnqueuedAt, enqueued, "EnqueuedAt")

	s := mustFetch(t, q, withSession("owner-a", long), "the session message")
	if s.RoutingKey != "" || len(s.Messages) != 1 {
		t.Fatalf("got %s, want the single un-keyed session message", describe(s))
	}
	d = s.Messages[0]
	if string(d.Payload) != "in a session" || d.Tag != "t2" || d.Session != "sess-1" || d.Key != "key-2" {
		t.Errorf("delivery has Payload %q Tag %q Session %q Key %q, want \"in a session\" \"t2\" \"sess-1\" \"key-2\"",
			d.Payload, d.Tag, d.Session, d.Key)
	}
	wantTime(t, d.EnqueuedAt, enqueued, "EnqueuedAt")
}

func testIDsIncreaseInEnqueueOrder(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("0"))
	put(t, q, mq.Message{Queue: "other", Payload: []byte("other-1")})
	put(t, q, msg("1"), msg("2"), msg("3"))
	put(t, q, mq.Message{Queue: "other", Payload: []byte("other-2")}, msg("4"))
	var got []int64
	for i := range 5 {
		b := fetchPayloads(t, q, mq.DequeueOptions{}, "FIFO", fmt.Sprint(i))
		got = append(got, b.Messages[0].ID)
	}
	o1 := fetchFrom(t, q, "other", mq.DequeueOptions{})
	o2 := fetchFrom(t, q, "other", mq.DequeueOptions{})
	if o1 == nil || o2 == nil {
		t.Fatal("queue other holds two messages")
	}
	// Enqueue order across both queues: 0, other-1, 1, 2, 3, other-2, 4.
	order := []int64{got[0], o1.Messages[0].ID, got[1], got[2], got[3], o2.Messages[0].ID, got[4]}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("IDs in enqueue order are %v: IDs must be unique and increase in enqueue order", order)
		}
	}
}

func testLockedUntilReflectsLockTimeout(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, msg("u1"), msg("u2"))
	clk.Advance(time.Second)
	b := mustFetch(t, q, mq.DequeueOptions{LockTimeout: 10 * time.Second}, "u1")
	wantTime(t, b.LockedUntil, clk.Now().Add(10*time.Second), "LockedUntil of a 10s lock")

	clk.Advance(time.Second)
	d := mustFetch(t, q, mq.DequeueOptions{}, "u2")
	wantTime(t, d.LockedUntil, clk.Now().Add(mq.DefaultLockTimeout), "LockedUntil of a zero LockTimeout (DefaultLockTimeout)")

	clk.Advance(time.Second)
	until, err := q.Renew(t.Context(), b.Token, 20*time.Second)
	if err != nil {
		t.Fatalf("Renew of a live lock failed: %v", err)
	}
	wantTime(t, until, clk.Now().Add(20*time.Second), "the expiry Renew(20s) returns")
}

func testEnqueueOfManyMessagesIsAtomicAndAllVisible(t *testing.T, e env) {
	q := e.open(t)
	var msgs []mq.Message
	var keyed, unkeyed []string
	for i := range 400 {
		p := fmt.Sprintf("m%03d", i)
		if i%2 == 0 {
			msgs = append(msgs, kmsg("K", p))
			keyed = append(keyed, p)
		} else {
			msgs = append(msgs, msg(p))
			unkeyed = append(unkeyed, p)
		}
	}
	put(t, q, msgs...)
	wantStats(t, q, qn, mq.Stats{Ready: 400}, "one Enqueue of 400 messages makes all of them visible")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the first message's key K comes with all 200 of its messages, in order", keyed...)
	for _, p := range unkeyed {
		fetchPayloads(t, q, mq.DequeueOptions{}, "the un-keyed messages follow in enqueue order", p)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "every message is locked")
}

func testFIFOFollowsEnqueueOrder(t *testing.T, e env) {
	q := e.open(t)
	for i := range 5 {
		put(t, q, msg(fmt.Sprint(i)))
	}
	put(t, q, msg("5"), msg("6"), msg("7"), kmsg("A", "8"), kmsg("B", "9"), kmsg("A", "10"))
	for i := range 8 {
		b := fetchPayloads(t, q, mq.DequeueOptions{}, "messages come out in enqueue order", fmt.Sprint(i))
		ack(t, q, b)
	}
	fetchPayloads(t, q, mq.DequeueOptions{}, "key A's oldest message is older than key B's", "8", "10")
	fetchPayloads(t, q, mq.DequeueOptions{}, "then key B", "9")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "all messages were delivered")
}

func testFIFOFollowsVisibilityThenEnqueueOrder(t *testing.T, e env) {
	q, clk := e.openClock(t)
	start := clk.Now()
	put(t, q, mq.Message{Queue: qn, Payload: []byte("late"), Delay: lt})
	put(t, q, msg("now"))
	put(t, q, mq.Message{Queue: qn, Payload: []byte("mid"), Delay: lt / 2})
	put(t, q, msg("now-2"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "the visible message comes before the delayed ones enqueued earlier", "now")
	ack(t, q, b)
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "visible messages come in enqueue order", "now-2")
	ack(t, q, b)
	clk.past(start.Add(lt))
	for _, p := range []string{"mid", "late"} {
		b := fetchPayloads(t, q, mq.DequeueOptions{}, "the message visible earliest comes first, whatever the enqueue order", p)
		ack(t, q, b)
	}
}

func testDelayedMessageIsInvisibleUntilDue(t *testing.T, e env) {
	q, clk := e.openClock(t)
	due := clk.Now().Add(lt)
	put(t, q, mq.Message{Queue: qn, RoutingKey: "A", Payload: []byte("a1"), Delay: lt},
		mq.Message{Queue: qn, Payload: []byte("u1"), Delay: lt})
	clk.justBefore(due)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a message is invisible until its Delay has passed")
	wantStats(t, q, qn, mq.Stats{Delayed: 2}, "the delay has not passed")
	clk.past(due)
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "the delay passed")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the delayed keyed message is visible after its delay", "a1")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the delayed un-keyed message is visible after its delay", "u1")
}

package conformance

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// settleCases: Settle ends batches message by message, atomically, several in one call.
var settleCases = []mqCase{
	{"SettleAcksAPrefixAndReleasesTheRest", testSettleAcksAPrefixAndReleasesTheRest},
	{"SettleCountsTheFetchOfTriedMessagesOnly", testSettleCountsTheFetchOfTriedMessagesOnly},
	{"SettleOfEveryMessageIsAnAck", testSettleOfEveryMessageIsAnAck},
	{"SettleMovesDeadLettersWithTheirHistory", testSettleMovesDeadLettersWithTheirHistory},
	{"SettleDeadLetterDropsAMessageKeyTheDeadLetterQueueHolds", testSettleDeadLetterDropsAMessageKeyTheDeadLetterQueueHolds},
	{"SettleRejectsInvalidSettlementsAndChangesNothing", testSettleRejectsInvalidSettlementsAndChangesNothing},
	{"SettleIsAtomicWhenAFollowUpIsRejected", testSettleIsAtomicWhenAFollowUpIsRejected},
	{"SettleWithLostLocksAppliesTheOthers", testSettleWithLostLocksAppliesTheOthers},
	{"SettleOfALapsedLockIsLost", testSettleOfALapsedLockIsLost},
	{"SettleOfManyBatchesInOneCall", testSettleOfManyBatchesInOneCall},
	{"AbandonRecordsAFailureUnlessItIgnoresTheAttempt", testAbandonRecordsAFailureUnlessItIgnoresTheAttempt},
}

// settle calls Settle and fails the test on error.
func settle(t *testing.T, q mq.MessageQueue, ss ...mq.Settlement) {
	t.Helper()
	if err := q.Settle(t.Context(), ss...); err != nil {
		t.Fatalf("Settle of %d valid settlement(s) of live batches failed: %v", len(ss), err)
	}
}

// wantSettleLost fails unless err is a *mq.SettleError matching mq.ErrLockLost whose
// Lost names exactly the settlements lost, each with an error matching ErrLockLost.
func wantSettleLost(t *testing.T, err error, rule string, lost ...int) {
	t.Helper()
	wantLockLost(t, err, "settle", rule)
	se, ok := errors.AsType[*mq.SettleError](err)
	if !ok {
		t.Fatalf("%s: Settle failed with %v (%T), want a *mq.SettleError", rule, err, err)
	}
	if got := slices.Sorted(maps.Keys(se.Lost)); !slices.Equal(got, lost) {
		t.Fatalf("%s: SettleError.Lost names settlements %v, want %v", rule, got, lost)
	}
	for i, e := range se.Lost {
		if !errors.Is(e, mq.ErrLockLost) {
			t.Errorf("%s: SettleError.Lost[%d] = %v, want an error matching ErrLockLost", rule, i, e)
		}
	}
}

// drain fetches from queue until nothing is left and returns the payloads in order.
func drain(t *testing.T, q mq.MessageQueue, queue string) []string {
	t.Helper()
	var got []string
	for {
		b := fetchFrom(t, q, queue, mq.DequeueOptions{})
		if b == nil {
			return got
		}
		got = append(got, payloads(b)...)
	}
}

func testSettleAcksAPrefixAndReleasesTheRest(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"), kmsg("K", "a3"), kmsg("K", "a4"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key K", "a1", "a2", "a3", "a4")
	settle(t, q, mq.Settlement{Token: b.Token, Acked: 2})
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "the acked prefix is deleted and the rest released at once")
	wantLockLost(t, q.Ack(t.Context(), b.Token), "ack", "an Ack with the token of a settled batch")
	r := fetchPayloads(t, q, mq.DequeueOptions{}, "the released rest comes back in order", "a3", "a4")
	wantAttempts(t, r, "released messages that were not tried do not count the fetch", 1, 1)
}

func testSettleCountsTheFetchOfTriedMessagesOnly(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"), kmsg("K", "a3"), kmsg("K", "a4"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key K", "a1", "a2", "a3", "a4")
	all := ids(b)
	settle(t, q, mq.Settlement{Token: b.Token, Tried: 2, Reason: "r1"})
	for i, id := range all {
		m := peekID(t, a, qn, id)
		tried := m.Attempt == 1 && m.LastError == "r1" && !m.LastFailedAt.IsZero()
		untried := m.Attempt == 0 && m.LastError == "" && m.LastFailedAt.IsZero()
		if (i < 2 && !tried) || (i >= 2 && !untried) {
			t.Fatalf("message %d after Settle{Tried: 2} is %s; want the first two tried (attempt 1, the Reason and a failure time) "+
				"and the others untried (attempt 0, no failure)", i, infoString(m))
		}
	}
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "key K again", "a1", "a2", "a3", "a4")
	wantAttempts(t, b, "the tried messages kept the fetch, the untried ones undid it", 2, 2, 1, 1)
	settle(t, q, mq.Settlement{Token: b.Token, Acked: 1, Tried: 100})
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "key K without a1", "a2", "a3", "a4")
	wantAttempts(t, b, "Tried beyond the released count means every released message was tried", 3, 2, 2)
	settle(t, q, mq.Settlement{Token: b.Token})
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "key K without a1", "a2", "a3", "a4")
	wantAttempts(t, b, "a settlement that releases everything untried undoes the fetch of every message", 3, 2, 2)
}

func testSettleOfEveryMessageIsAnAck(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key K", "a1", "a2")
	settle(t, q, mq.Settlement{Token: b.Token, Acked: 2, Then: []mq.Message{
		kmsg("K", "a3"), {Queue: "other", Payload: []byte("o1"), Tag: "gpu"},
	}})
	wantLockLost(t, q.Ack(t.Context(), b.Token), "ack", "an Ack with the token of a batch settled as acked")
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "a1 and a2 are deleted and the follow-up a3 enqueued")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the settlement released the key: its follow-up is delivered", "a3")
	o := fetchFrom(t, q, "other", mq.DequeueOptions{})
	if o == nil || string(o.Messages[0].Payload) != "o1" || o.Messages[0].Tag != "gpu" {
		t.Fatalf("queue other: got %s, want the follow-up o1 tagged gpu", describe(o))
	}
}

func testSettleMovesDeadLettersWithTheirHistory(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	put(t, q,
		mq.Message{Queue: qn, RoutingKey: "K", Payload: []byte("a1"), Tag: "gpu", Key: "m1"},
		mq.Message{Queue: qn, RoutingKey: "K", Payload: []byte("a2"), Key: "m2"},
		kmsg("K", "a3"),
		mq.Message{Queue: qn, Payload: []byte("u1"), Key: "mu"},
	)
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key K", "a1", "a2", "a3")
	clk.Advance(time.Second)
	firstFailed := clk.Now()
	abandon(t, q, b, mq.AbandonOptions{Reason: "the first failure"})
	u := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1 (visible before the abandoned key K)", "u1")
	b = fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key K again", "a1", "a2", "a3")
	// Two-byte runes: clipping at MaxReasonSize must keep whole runes.
	reason := "x" + strings.Repeat("é", mq.MaxReasonSize)
	clipped := mq.TruncateUTF8(reason, mq.MaxReasonSize)
	clk.Advance(time.Second)
	settled := clk.Now()
	settle(t, q,
		mq.Settlement{Token: b.Token, DeadLettered: 2, DeadLetterQueue: "dlq", Reason: reason, Tried: 1},
		mq.Settlement{Token: u.Token, DeadLettered: 1, DeadLetterQueue: "dlq", Reason: "bad input"},
	)
	clk.Advance(time.Second)

	dead := peek(t, a, "dlq", mq.PeekOptions{})
	if len(dead) != 3 {
		t.Fatalf("Peek of the dead-letter queue returned %d messages, want the 3 dead letters", len(dead))
	}
	want := []struct {
		id                    int64
		payload, key, tag, rk string
		attempt               int
		lastError             string
		failedBefore          bool
	}{
		{b.Messages[0].ID, "a1", "m1", "gpu", "K", 2, clipped, true},
		{b.Messages[1].ID, "a2", "m2", "", "K", 2, clipped, true},
		{u.Messages[0].ID, "u1", "mu", "", "", 1, "bad input", false},
	}
	for i, w := range want {
		m := dead[i]
		if m.ID != w.id || m.Queue != "dlq" || string(m.Payload) != w.payload || m.Key != w.key || m.Tag != w.tag ||
			m.RoutingKey != w.rk || m.Attempt != w.attempt || m.Locked || m.OriginQueue != qn {
			t.Fatalf("dead letter %d is %s, want id %d in queue dlq from %q with payload %q, message key %q, tag %q, routing key %q, attempt %d, unlocked",
				i, infoString(m), w.id, qn, w.payload, w.key, w.tag, w.rk, w.attempt)
		}
		if m.LastError != w.lastError {
			t.Errorf("dead letter %d has LastError of %d bytes (%q...), want the Reason clipped to %d bytes at a rune boundary",
				i, len(m.LastError), mq.TruncateUTF8(m.LastError, 20), len(w.lastError))
		}
		wantTime(t, m.DeadLetteredAt, settled, fmt.Sprintf("DeadLetteredAt of dead letter %d", i))
		wantTime(t, m.LastFailedAt, settled, fmt.Sprintf("LastFailedAt of dead letter %d", i))
		if w.failedBefore {
			wantTime(t, m.FirstFailedAt, firstFailed, fmt.Sprintf("FirstFailedAt of dead letter %d (its first failure)", i))
		} else {
			wantTime(t, m.FirstFailedAt, settled, fmt.Sprintf("FirstFailedAt of dead letter %d (its only failure)", i))
		}
		wantTime(t, m.VisibleAt, settled, fmt.Sprintf("VisibleAt of dead letter %d (visible at once)", i))
	}
	rest := peekID(t, a, qn, b.Messages[2].ID)
	if rest.LastError != clipped || rest.OriginQueue != "" || !rest.DeadLetteredAt.IsZero() || rest.Attempt != 2 {
		t.Fatalf("the released, tried a3 is %s; want the clipped Reason as LastError, no origin or dead-letter time, attempt 2", infoString(rest))
	}
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "only the released a3 stays in the queue")
	if err := q.Enqueue(t.Context(), mq.Message{Queue: qn, Payload: []byte("again"), Key: "m1"}); err != nil {
		t.Fatalf("the message key m1 left the queue with its dead letter, but an Enqueue reusing it failed: %v", err)
	}

	d := fetchFrom(t, q, "dlq", mq.DequeueOptions{})
	if d == nil {
		t.Fatal("the dead letters are not delivered from the dead-letter queue")
	}
	wantPayloads(t, d, "the dead letters of key K are a batch of their key in the dead-letter queue", "a1", "a2")
	wantAttempts(t, d, "dead letters keep their attempt count", 3, 3)
	wantKey(t, d, "K", "dead letters keep their routing key")
}

func testSettleDeadLetterDropsAMessageKeyTheDeadLetterQueueHolds(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, mq.Message{Queue: "dlq", Payload: []byte("x"), Key: "held"},
		keyed("K", "own", "a1"), keyed("K", "held", "a2"), keyed("K", "", "a3"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key K", "a1", "a2", "a3")
	settle(t, q, mq.Settlement{Token: b.Token, DeadLettered: 3, DeadLetterQueue: "dlq"})
	var got []string
	for _, m := range peek(t, a, "dlq", mq.PeekOptions{}) {
		got = append(got, string(m.Payload)+"="+m.Key)
	}
	if want := []string{"x=held", "a1=own", "a2=", "a3="}; !equalStrings(got, want) {
		t.Fatalf("the dead-letter queue holds payload=key %q, want %q: a dead letter keeps its message key unless the dead-letter queue already holds it", got, want)
	}
	wantErrIs(t, q.Enqueue(t.Context(), mq.Message{Queue: "dlq", Key: "own"}), mq.ErrDuplicateKey, "Enqueue",
		"the dead letter's message key is pending in the dead-letter queue")
	put(t, q, keyed("", "own", "new-own"), keyed("", "held", "new-held"))
}

func testSettleRejectsInvalidSettlementsAndChangesNothing(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"), msg("u1"))
	k := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key K", "a1", "a2")
	u := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1", "u1")
	// A valid settlement comes first in every call: applying it would show.
	valid := mq.Settlement{Token: u.Token, Acked: 1, Then: []mq.Message{msg("follow-up")}}
	for _, c := range []struct {
		rule   string
		s      mq.Settlement
		fields []string
	}{
		{"a negative Acked", mq.Settlement{Acked: -1}, []string{"Acked"}},
		{"a negative DeadLettered", mq.Settlement{DeadLettered: -1, DeadLetterQueue: "dlq"}, []string{"DeadLettered"}},
		{"a negative Tried", mq.Settlement{Tried: -1}, []string{"Tried"}},
		{"a negative Delay", mq.Settlement{Delay: -time.Second}, []string{"Delay"}},
		{"Acked beyond the batch", mq.Settlement{Acked: 3}, []string{"Acked"}},
		{"Acked+DeadLettered beyond the batch", mq.Settlement{Acked: 1, DeadLettered: 2, DeadLetterQueue: "dlq"}, []string{"Acked", "DeadLettered"}},
		{"dead letters without a dead-letter queue", mq.Settlement{DeadLettered: 1}, []string{"DeadLetterQueue"}},
		{"the batch's own queue as dead-letter queue", mq.Settlement{DeadLettered: 1, DeadLetterQueue: qn}, []string{"DeadLetterQueue"}},
		{"a dead-letter queue name over MaxNameSize", mq.Settlement{DeadLettered: 1, DeadLetterQueue: tooLong}, []string{"DeadLetterQueue"}},
		{"a follow-up with a negative Delay", mq.Settlement{Acked: 2, Then: []mq.Message{{Queue: qn, Delay: -time.Second}}}, []string{"Delay"}},
		{"a follow-up without a queue", mq.Settlement{Acked: 2, Then: []mq.Message{{Payload: []byte("x")}}}, []string{"Queue"}},
	} {
		s := c.s
		s.Token = k.Token
		err := call(t, "Settle", func() error { return q.Settle(t.Context(), valid, s) })
		wantInvalid(t, err, "settle", "Settle with "+c.rule, c.fields...)
	}
	err := call(t, "Settle", func() error {
		return q.Settle(t.Context(), valid, mq.Settlement{Token: k.Token, Acked: 1}, mq.Settlement{Token: k.Token, Acked: 1})
	})
	wantInvalid(t, err, "settle", "Settle with a token twice in one call", "Token")
	err = call(t, "Settle", func() error {
		return q.Settle(t.Context(), valid, mq.Settlement{Token: k.Token, Acked: 2, Then: []mq.Message{{Queue: qn, Payload: make([]byte, mq.MaxPayloadSize+1)}}})
	})
	wantErr(t, err, mq.ErrPayloadTooLarge, "settle", "Settle with an oversized follow-up")

	wantStats(t, q, qn, mq.Stats{Locked: 3}, "rejected Settle calls delete, release and enqueue nothing")
	wantStats(t, q, "dlq", mq.Stats{}, "rejected Settle calls dead-letter nothing")
	for _, b := range []*mq.Batch{k, u} {
		if li, err := q.Lock(t.Context(), b.Token); err != nil || li.Messages != len(b.Messages) {
			t.Fatalf("Lock of %s after rejected Settle calls = %+v, %v; want the lock still held with all its messages", describe(b), li, err)
		}
	}
	settle(t, q, valid, mq.Settlement{Token: k.Token, Acked: 2})
	fetchPayloads(t, q, mq.DequeueOptions{}, "the valid settlements still apply", "follow-up")
}

func testSettleIsAtomicWhenAFollowUpIsRejected(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"), msg("u2"), mq.Message{Queue: qn, Payload: []byte("holder"), Key: "taken", Delay: long})
	b1 := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1", "u1")
	b2 := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u2", "u2")
	for _, c := range []struct {
		rule   string
		s1, s2 mq.Settlement
	}{
		{"the second settlement's follow-up reuses a pending message key",
			mq.Settlement{Token: b1.Token, Acked: 1, Then: []mq.Message{msg("t1")}},
			mq.Settlement{Token: b2.Token, DeadLettered: 1, DeadLetterQueue: "dlq", Then: []mq.Message{keyed("", "taken", "dup")}}},
		{"the follow-ups of two settlements share a message key",
			mq.Settlement{Token: b1.Token, Acked: 1, Then: []mq.Message{keyed("", "fresh", "t1")}},
			mq.Settlement{Token: b2.Token, Acked: 1, Then: []mq.Message{keyed("", "fresh", "t2")}}},
	} {
		err := q.Settle(t.Context(), c.s1, c.s2)
		wantErrIs(t, err, mq.ErrDuplicateKey, "Settle", c.rule)
		wantStats(t, q, qn, mq.Stats{Delayed: 1, Locked: 2}, c.rule+": a failed Settle applies none of its settlements")
		wantStats(t, q, "dlq", mq.Stats{}, c.rule+": a failed Settle dead-letters nothing")
	}
	settle(t, q, mq.Settlement{Token: b1.Token, Acked: 1}, mq.Settlement{Token: b2.Token, Acked: 1})
	wantStats(t, q, qn, mq.Stats{Delayed: 1}, "both locks were still held after the failed calls")
}

func testSettleWithLostLocksAppliesTheOthers(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"), msg("u2"), kmsg("K", "a1"), msg("u3"))
	b1 := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1", "u1")
	acked := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u2", "u2")
	ack(t, q, acked)
	k := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key K", "a1")
	b4 := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u3", "u3")
	err := q.Settle(t.Context(),
		mq.Settlement{Token: b1.Token, Acked: 1, Then: []mq.Message{msg("then-0")}},
		mq.Settlement{Token: "no-such-token", Acked: 1, Then: []mq.Message{msg("then-1")}},
		mq.Settlement{Token: acked.Token, Acked: 1, Then: []mq.Message{msg("then-2")}},
		mq.Settlement{Token: k.Token, Tried: 1},
		mq.Settlement{Token: ""},
		// A lost lock is reported as lost before its size could be checked.
		mq.Settlement{Token: "lost-and-too-large", Acked: 100},
		mq.Settlement{Token: b4.Token, DeadLettered: 1, DeadLetterQueue: "dlq"},
	)
	wantSettleLost(t, err, "a Settle with unknown, acked and empty tokens among live ones", 1, 2, 4, 5)
	got := drain(t, q, qn)
	slices.Sort(got)
	if want := []string{"a1", "then-0"}; !equalStrings(got, want) {
		t.Fatalf("after the Settle the queue delivered %q, want %q: the held settlements apply (u1 acked with its follow-up, a1 released, u3 dead-lettered), the lost ones do nothing", got, want)
	}
	if got := drain(t, q, "dlq"); !equalStrings(got, []string{"u3"}) {
		t.Fatalf("the dead-letter queue delivered %q, want [u3]", got)
	}
}

func testSettleOfALapsedLockIsLost(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, msg("u1"), msg("u2"))
	lapsing := fetchPayloads(t, q, short, "u1", "u1")
	held := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u2", "u2")
	clk.past(lapsing.LockedUntil)
	err := q.Settle(t.Context(),
		mq.Settlement{Token: lapsing.Token, Acked: 1, Then: []mq.Message{msg("then-lapsed")}},
		mq.Settlement{Token: held.Token, Acked: 1},
	)
	wantSettleLost(t, err, "a Settle of a lapsed lock and a live one", 0)
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "the lapsed u1 is kept without follow-up and the held u2 acked")
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "the message of the lapsed lock is fetchable again", "u1")
	wantAttempts(t, b, "second fetch", 2)
}

func testSettleOfManyBatchesInOneCall(t *testing.T, e env) {
	q := e.open(t)
	var msgs []mq.Message
	for i := range 30 {
		msgs = append(msgs, msg(fmt.Sprintf("u%02d", i)))
	}
	for k := range 10 {
		for j := range 3 {
			msgs = append(msgs, kmsg(fmt.Sprintf("k%d", k), fmt.Sprintf("k%d-%d", k, j)))
		}
	}
	put(t, q, msgs...)
	bs := fetchBatches(t, q, mq.DequeueOptions{LockTimeout: long}, 100)
	if len(bs) != 40 {
		t.Fatalf("DequeueBatches(100) returned %d batches, want 40 (30 un-keyed messages and 10 keys)", len(bs))
	}
	var ss []mq.Settlement
	unkeyedAcked := 0
	for i, b := range bs {
		switch {
		case b.RoutingKey != "":
			ss = append(ss, mq.Settlement{Token: b.Token, Acked: 1, DeadLettered: 1, DeadLetterQueue: "dlq", Tried: 1})
		case i%2 == 0:
			ss = append(ss, mq.Settlement{Token: b.Token, Acked: 1, Then: []mq.Message{{Queue: "done", Payload: b.Messages[0].Payload}}})
			unkeyedAcked++
		default:
			ss = append(ss, mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: "dlq"})
		}
	}
	settle(t, q, ss...)
	wantStats(t, q, qn, mq.Stats{Ready: 10}, "each key's third message was released, everything else settled")
	wantStats(t, q, "dlq", mq.Stats{Ready: 10 + 30 - unkeyedAcked}, "each key's second message and the other un-keyed messages were dead-lettered")
	wantStats(t, q, "done", mq.Stats{Ready: unkeyedAcked}, "every acked un-keyed message enqueued its follow-up")
	for range 10 {
		b := mustFetch(t, q, mq.DequeueOptions{}, "the released third message of each key")
		if len(b.Messages) != 1 || !strings.HasSuffix(string(b.Messages[0].Payload), "-2") {
			t.Fatalf("got %s, want the third message of its key alone", describe(b))
		}
		wantAttempts(t, b, "the released message was tried", 2)
	}
}

func testAbandonRecordsAFailureUnlessItIgnoresTheAttempt(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	put(t, q, msg("u1"), msg("u2"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	clk.Advance(time.Second)
	first := clk.Now()
	abandon(t, q, b, mq.AbandonOptions{Reason: "timeout"})
	m := peekID(t, a, qn, b.Messages[0].ID)
	if m.LastError != "timeout" || m.Attempt != 1 {
		t.Fatalf("after Abandon with Reason %q the message is %s; want that LastError and attempt 1", "timeout", infoString(m))
	}
	wantTime(t, m.FirstFailedAt, first, "FirstFailedAt after the first failed attempt")
	wantTime(t, m.LastFailedAt, first, "LastFailedAt after the first failed attempt")
	clk.Advance(time.Second)

	u := fetchPayloads(t, q, mq.DequeueOptions{}, "u2", "u2")
	abandon(t, q, u, mq.AbandonOptions{IgnoreAttempt: true, Reason: "shutting down"})
	if m := peekID(t, a, qn, u.Messages[0].ID); m.LastError != "" || !m.FirstFailedAt.IsZero() || !m.LastFailedAt.IsZero() || m.Attempt != 0 {
		t.Fatalf("after Abandon with IgnoreAttempt the message is %s; want no failure recorded and attempt 0", infoString(m))
	}

	b = fetchPayloads(t, q, mq.DequeueOptions{}, "u1 again", "u1")
	clk.Advance(time.Second)
	second := clk.Now()
	abandon(t, q, b, mq.AbandonOptions{})
	m = peekID(t, a, qn, b.Messages[0].ID)
	if m.LastError != "" || m.Attempt != 2 {
		t.Fatalf("after a second Abandon without Reason the message is %s; want LastError \"\" (none given), attempt 2", infoString(m))
	}
	wantTime(t, m.FirstFailedAt, first, "FirstFailedAt after a second failure (the first failure's, kept)")
	wantTime(t, m.LastFailedAt, second, "LastFailedAt after a second failure (the second failure's)")
}
